#include "tf_ps_ops/cc/engine/partition.h"

#include <algorithm>

namespace tfps {

int ServerOfPartition(uint64_t key, uint32_t partition, int num_servers) {
  // splitmix64 finaliser: FNV keys of similar names differ in few low bits.
  uint64_t z = key + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<int>((z + partition) % static_cast<uint64_t>(num_servers));
}

std::vector<Partition> PartitionTensor(uint64_t key, uint64_t total_count, size_t elem_size,
                                       int64_t partition_bytes, int num_servers,
                                       uint64_t row_elems) {
  // A tensor worth several partitions is never cut coarser than one share per server, so
  // every server's link carries part of it and pushes pipeline with pulls (measured in
  // benchmarks/RESULTS.md: a 4 MB tensor in one partition reached 49% of a 1 Gbit/s link
  // on 2 hosts, in 512 KB partitions 93%). Below kMinSplitBytes the extra round trips
  // cost more than they save.
  constexpr uint64_t kMinSplitBytes = 64 * 1024;
  const uint64_t elem = std::max<size_t>(1, elem_size);
  uint64_t per_part = std::max<uint64_t>(1, static_cast<uint64_t>(partition_bytes) / elem);
  if (num_servers > 1 && total_count * elem > kMinSplitBytes) {
    const uint64_t servers = static_cast<uint64_t>(num_servers);
    const uint64_t share = (total_count + servers - 1) / servers;
    per_part = std::min(per_part, std::max(kMinSplitBytes / elem, share));
  }
  if (row_elems > 1 && row_elems <= per_part) per_part -= per_part % row_elems;
  const uint64_t n = total_count == 0 ? 1 : (total_count + per_part - 1) / per_part;
  std::vector<Partition> parts(n);
  for (uint64_t i = 0; i < n; ++i) {
    Partition& p = parts[i];
    p.index = static_cast<uint32_t>(i);
    p.offset = i * per_part;
    p.count = std::min(per_part, total_count - std::min(total_count, p.offset));
    p.server = ServerOfPartition(key, p.index, num_servers);
  }
  return parts;
}

}  // namespace tfps

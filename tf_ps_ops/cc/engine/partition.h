// How a tensor is cut into partitions and which server owns each partition.
#ifndef TFPS_CC_ENGINE_PARTITION_H_
#define TFPS_CC_ENGINE_PARTITION_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tfps {

struct Partition {
  uint32_t index = 0;
  uint64_t offset = 0;  // in elements
  uint64_t count = 0;   // in elements
  int server = 0;
};

// Cuts `total_count` elements of `elem_size` bytes into partitions of at most
// `partition_bytes` (at least one element each), and of at most one server's share when
// the tensor is larger than 64 KB. An empty tensor still has one partition
// of zero elements, so it makes a round trip and its shape is checked like any other.
// With `row_elems` > 1 (PS mode, tensors of rank >= 2) boundaries fall on multiples of a row
// whenever a row fits in `partition_bytes`, so a sparse push (rows) maps to whole rows of
// the partitions that the dense init and apply rounds created on the servers.
std::vector<Partition> PartitionTensor(uint64_t key, uint64_t total_count, size_t elem_size,
                                       int64_t partition_bytes, int num_servers,
                                       uint64_t row_elems = 1);

// Consecutive partitions of one key go to consecutive servers, starting at a server chosen
// by the key's hash: one big tensor uses every server's link, and many small tensors
// spread evenly.
int ServerOfPartition(uint64_t key, uint32_t partition, int num_servers);

}  // namespace tfps

#endif  // TFPS_CC_ENGINE_PARTITION_H_

// Which summation thread of a server owns a parameter partition. Written once because two
// places must agree: the I/O thread routes each push to its owner (shard_server.cc), and a
// checkpoint file holds only its thread's partitions (checkpoint.cc), so after a restore
// each thread holds exactly the keys the workers' pushes will bring it.
#ifndef TFPS_PS_SERVER_THREAD_SHARD_H_
#define TFPS_PS_SERVER_THREAD_SHARD_H_

#include <cstdint>

namespace tfps {

// `num_threads` > 0. The sum (not a hash of the pair) keeps a tensor's consecutive
// partitions on consecutive threads, so a large tensor spreads over all of them.
inline int ThreadOfPartition(uint64_t key, uint32_t partition, int num_threads) {
  return static_cast<int>((key + partition) % static_cast<uint64_t>(num_threads));
}

}  // namespace tfps

#endif  // TFPS_PS_SERVER_THREAD_SHARD_H_

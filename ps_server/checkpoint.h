// Server checkpoints: every parameter partition a summation thread's KeyStore holds, in one
// file per (server id, thread), written atomically and read back before the server serves.
//
// File layout, version 1 (little-endian, every field fixed-size):
//   FileHeader  (40 bytes)  magic "TFPSCKPT", version, header bytes, server id, number of
//                           servers, thread, number of threads, number of records
//   records, in increasing (key, partition) order, each:
//     RecordHeader (32 bytes)  key, partition, dtype, optimizer, number of slots, count,
//                              updates applied
//     value                    count * size(dtype) bytes
//     slots                    number of slots * count * size(dtype) bytes
//   Trailer     (16 bytes)  bytes before the trailer, CRC-32 (IEEE, as zlib) of those
//                           bytes, end magic "TFPE"
// Reading checks everything (magic, version, sizes, codes, record order, the thread each
// key hashes to, CRC) and fails with a Status naming the file and the fault; nothing is
// handed over unless the whole file is good.
#ifndef TFPS_PS_SERVER_CHECKPOINT_H_
#define TFPS_PS_SERVER_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

constexpr uint32_t kCheckpointVersion = 1;

// The most optimizer updates a restored parameter may claim: 2^62, thousands of years of
// updates at a million a second, yet far from 2^64, so that the count, which only ever
// grows by one, can never wrap (a wrapped count of 0 would stop every later checkpoint:
// ParameterStore::CheckpointDue waits for all parameters to share a nonzero count).
constexpr uint64_t kMaxCheckpointUpdates = uint64_t{1} << 62;

// One partition of a PS-mode parameter as the server holds it.
struct ShardParam {
  DType dtype = DType::kInvalid;
  uint64_t count = 0;  // elements in this partition
  std::vector<char> value;
  std::vector<std::vector<char>> slots;  // created at the first update
  Optimizer optimizer = Optimizer::kNone;
  uint64_t updates = 0;  // optimizer updates applied
};
using ParamId = std::pair<uint64_t, uint32_t>;  // key, partition
using ShardParams = std::map<ParamId, ShardParam>;

// Where a file belongs: restoring needs the same servers and threads (keys are sharded over
// both), so each file says which it was written by.
struct ShardInfo {
  int32_t server_id = -1;
  int32_t num_servers = 0;
  int32_t thread = -1;
  int32_t num_threads = 0;
};

// "shard-<server>-<thread>.ckpt"
std::string CheckpointFileName(int server_id, int thread);

// Writes `path` atomically: `path`.tmp is written and fsync'ed, renamed over `path`, and the
// directory is fsync'ed. A crash at any point leaves the previous file intact. `progress`
// (if set) is called after each record: a long write shows the server's heartbeat that the
// thread still moves (thread_watch.h).
Status WriteCheckpoint(const std::string& path, const ShardInfo& info, const ShardParams& params,
                       const std::function<void()>& progress = nullptr);

// Reads and validates one file. On failure *info and *params are untouched.
Status ReadCheckpoint(const std::string& path, ShardInfo* info, ShardParams* params);

// Creates `dir` (one level) unless it exists.
Status EnsureCheckpointDir(const std::string& dir);

// The (server id, thread) of every checkpoint file in `dir`, from the file names.
Status ListCheckpoints(const std::string& dir, std::vector<std::pair<int, int>>* found);

// Reads the files of server `want.server_id` for every thread listed in `existing` (see
// ListCheckpoints) into (*per_thread)[thread]. No file of this server and none of any
// other: *per_thread is left empty (a fresh start). Anything else that does not fit `want`
// (a thread's file missing, files written by another number of servers or threads, files of
// other servers only, a corrupt file) is a FailedPrecondition that says what to do.
Status LoadShard(const std::string& dir, const std::vector<std::pair<int, int>>& existing,
                 const ShardInfo& want, std::vector<ShardParams>* per_thread);

// CRC-32 (IEEE 802.3, the polynomial of zlib's crc32) continued from `crc`.
uint32_t Crc32(uint32_t crc, const void* data, size_t size);

}  // namespace tfps

#endif  // TFPS_PS_SERVER_CHECKPOINT_H_

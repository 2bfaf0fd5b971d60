// The C++ side's environment variables: one table (name, type, default, doc), parsed in
// one place. docs/env.md is checked against this table and the Python one by a test. The
// table is in config_table.cc, its parsing (LoadConfig) in config.cc.
#ifndef TFPS_CC_COMMON_CONFIG_H_
#define TFPS_CC_COMMON_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tf_ps_ops/cc/common/consistency.h"
#include "tf_ps_ops/cc/common/stall.h"
#include "tf_ps_ops/cc/common/status.h"

namespace tfps {

struct ConfigEntry {
  const char* name;
  const char* type;  // "int", "float", "string"
  const char* default_value;
  const char* doc;
};

// Upper bounds of the timeouts (LoadConfig uses larger values as these, with a warning).
constexpr double kMaxTimeoutS = 30 * 24 * 3600.0;  // TFPS_TIMEOUT
constexpr double kMaxHeartbeatTimeoutS = 6553.5;     // TFPS_HEARTBEAT_TIMEOUT: ZeroMQ carries
                                                     // the TTL in deciseconds in 16 bits

// TFPS_IO_THREADS: a socket's ZMQ_AFFINITY is a 64-bit mask of I/O threads.
constexpr int kMaxIoThreads = 64;
// TFPS_SCHEDULING_CREDIT and TFPS_FUSION_BYTES, at start and when the autotuner changes
// them (Engine::SetTuning).
constexpr int64_t kMaxSchedulingCredit = int64_t{1} << 40;
constexpr int64_t kMaxFusionBytes = int64_t{1} << 31;
// TFPS_CYCLE_US: how long a fusion batch may wait for more partitions (100 ms at most).
constexpr int64_t kMaxCycleUs = 100000;

// Every TFPS_* variable the C++ core reads.
const std::vector<ConfigEntry>& ConfigTable();

struct Config {
  double timeout_s = 0;            // TFPS_TIMEOUT
  double heartbeat_timeout_s = 0;  // TFPS_HEARTBEAT_TIMEOUT
  StallPolicy stall;               // TFPS_STALL_WARNING, TFPS_STALL_SHUTDOWN
  int64_t partition_bytes = 0;     // TFPS_PARTITION_BYTES
  int server_threads = 0;          // TFPS_SERVER_THREADS
  int io_threads = 1;              // TFPS_IO_THREADS (0 resolved to the automatic count)
  std::string log_level;           // TFPS_LOG_LEVEL
  bool log_timestamp = false;      // TFPS_LOG_TIMESTAMP
  std::string checkpoint_dir;      // TFPS_CHECKPOINT_DIR (empty: no server checkpoints)
  int64_t checkpoint_every = 0;    // TFPS_CHECKPOINT_EVERY
  int64_t scheduling_credit = 0;   // TFPS_SCHEDULING_CREDIT (0: unlimited)
  int64_t fusion_bytes = 0;        // TFPS_FUSION_BYTES (0: no batches)
  int64_t cycle_us = 0;            // TFPS_CYCLE_US (0: a batch leaves in the turn it began)
  int64_t max_message_bytes = 0;   // TFPS_MAX_MESSAGE_BYTES
  int64_t server_push_bytes = 0;   // TFPS_SERVER_PUSH_BYTES (ps_server)
  int64_t peer_queue_bytes = 0;    // TFPS_PEER_QUEUE_BYTES
  std::string timeline;            // TFPS_TIMELINE
  std::string compression;         // TFPS_COMPRESSION (engine: cc/codec's ParseCodec)
  bool error_feedback = true;      // TFPS_ERROR_FEEDBACK
  bool hierarchical = true;        // TFPS_HIERARCHICAL
  bool shm_server = true;          // TFPS_SHM_SERVER
  std::string nccl_library;        // TFPS_NCCL_LIBRARY (empty: the usual places)
  std::string bind;                // TFPS_BIND
  std::string auth_secret_key;     // read from TFPS_AUTH_KEY_FILE (Z85); empty: no CURVE
  Consistency consistency;         // TFPS_CONSISTENCY (workers; servers take the job's from
                                   // the scheduler)
  std::string consistency_trace;   // TFPS_CONSISTENCY_TRACE (ps_server; empty: none)
  bool insecure = false;           // TFPS_INSECURE: may bind beyond loopback without a key
  int metrics_port = -1;           // TFPS_METRICS_PORT (-1: unset, no metrics endpoint)
};

// Reads every entry of ConfigTable() from the environment (defaults where unset) and
// validates it. A bad value is an InvalidArgument naming the variable.
Status LoadConfig(Config* config);

}  // namespace tfps

#endif  // TFPS_CC_COMMON_CONFIG_H_

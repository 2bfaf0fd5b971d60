// The worker engine: takes tensors from the TF kernels (any thread), cuts them into
// partitions, sends them to the servers that own them and completes each request when all
// partitions' sums are back. One engine thread owns every socket (ZeroMQ sockets are
// single-threaded); the kernels only touch the queue.
//
//   kernel threads --Enqueue()--> queue --(eventfd)--> engine thread --> servers
//   engine thread <-- replies -- servers;  engine thread --> done(status)
#ifndef TFPS_CC_ENGINE_ENGINE_H_
#define TFPS_CC_ENGINE_ENGINE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tf_ps_ops/cc/cluster/messages.h"
#include "tf_ps_ops/cc/codec/codec.h"
#include "tf_ps_ops/cc/common/config.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/engine/device_codec.h"
#include "tf_ps_ops/cc/engine/peer_mesh.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

class Hierarchical;  // hierarchical.h

struct EngineOptions {
  std::string scheduler_host;
  int scheduler_port = 0;
  int rank = 0;
  int size = 1;
  int num_servers = 1;
};

// One push_pull of one tensor. `done` is called exactly once, on the engine thread.
struct PushPullRequest {
  std::string name;             // identical on every worker; the key is its hash
  DType dtype = DType::kInvalid;
  std::vector<int64_t> dims;
  uint64_t count = 0;           // elements
  const void* input = nullptr;
  void* output = nullptr;       // count elements, written before done(OK)
  int root_rank = -1;           // >= 0: broadcast, only root_rank's data is summed
  std::vector<int32_t> members;  // a process set's ranks (kFlagProcessSet); empty: all workers
  // hvd.join() (MsgType::kJoin): int32, one element per server, each its own partition
  // for that server; each answer is the last rank to join. Nothing else is set but
  // flags: kFlagJoinLeads or kFlagJoinRelease (join.h).
  bool join = false;
  // Hierarchical aggregation: a step a joined local leader runs with zeros for the
  // members that still train (hierarchical_join.cc), not a call of its own.
  bool join_zeros = false;
  ReduceOp reduce_op = ReduceOp::kSum;  // how the servers combine the pushes (min, max, ...)
  uint32_t flags = 0;           // kFlagPsInit / kFlagPsApply (PS mode), see wire/message.h
  Optimizer optimizer = Optimizer::kNone;
  std::vector<double> params;   // optimizer hyperparameters, then slot initial values
  // Sparse (flags has kFlagSparse, with kFlagPsApply): `input` holds `num_rows` rows of
  // RowElements(dims) elements, whose row ids are `rows` (strictly increasing); `output` is
  // unused. The engine cuts them by partition (only those rows travel) and hands each
  // partition's answer (every row any worker touched: ids, then their new values) to
  // `on_rows`, on the engine thread, before `done`.
  const int64_t* rows = nullptr;
  uint64_t num_rows = 0;
  std::function<void(const int64_t* ids, uint64_t n, const void* values)> on_rows;
  int priority = 0;             // smaller goes first (layers nearer the input: lower)
  // Compression of a float32 summation push_pull (docs/compression.md): none set means the
  // job default (TFPS_COMPRESSION). error_feedback: -1 the job's TFPS_ERROR_FEEDBACK, 0, 1.
  std::optional<CodecSpec> codec;
  int error_feedback = -1;
  std::chrono::steady_clock::time_point enqueued;  // set by Engine::Enqueue (timeline)
  std::shared_ptr<void> input_holder;  // keeps `input` alive until ZeroMQ has sent it
  std::function<void(const Status&)> done;
  // >= 0: `input` and `output` are memory of this CUDA device, which only the NCCL local
  // reduction takes (device_reduce.h; a GPU kernel asks TakesDeviceTensor first), and
  // `device_ready` is a cudaEvent_t after which `input` holds the data.
  int device = -1;
  void* device_ready = nullptr;
  // Set by a GPU kernel when EncodesOnDevice said yes: the partitions are encoded and the
  // replies decoded on the GPU through this hook (device_codec.h); `input` and `output`
  // are then device memory that the engine never reads or writes.
  std::shared_ptr<DeviceCodec> device_codec;
};

struct EngineStats {
  uint64_t bytes_sent = 0;      // payload bytes
  uint64_t bytes_received = 0;
  uint64_t messages_sent = 0;    // ZeroMQ messages to servers (a batch is one)
  uint64_t peer_bytes_sent = 0;  // allgather payload bytes sent to other workers
  uint64_t parts_sent = 0;       // partitions pushed (alone or in batches)
  uint64_t batches_sent = 0;     // messages that carried more than one partition
  uint64_t batches_received = 0;  // replies that came as batches
  // Compressed pushes (included in bytes_sent as encoded): the float32 bytes they stood
  // for, their encoded bytes, and the engine thread's CPU microseconds encoding and decoding.
  uint64_t codec_raw_bytes = 0;
  uint64_t codec_encoded_bytes = 0;
  uint64_t codec_micros = 0;
  uint64_t peer_bytes_received = 0;  // peer data payload bytes from other workers
  uint64_t shm_parts_sent = 0;  // of parts_sent: through the colocated server's shared memory
};

class Engine {
 public:
  static Engine& Get();

  // Rendezvous, connect to every server, check versions, start the engine thread.
  Status Init(const EngineOptions& options);
  // Says goodbye to servers and scheduler, fails what is still queued, joins the thread.
  void Shutdown();

  bool initialized() const { return initialized_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int num_servers() const { return num_servers_; }
  // Whether push_pulls may go through hierarchical aggregation (TFPS_HIERARCHICAL, several
  // workers on this host).
  bool hierarchical() {
    std::lock_guard<std::mutex> lock(loop_mu_);
    return hierarchical_ != nullptr;
  }
  EngineStats stats();
  // The send queue's fusion threshold and scheduling credit, changed while training runs
  // (the autotuner: tf_ps_ops.plan.autotune). InvalidArgument for values the job could not
  // start with (config.cc's bounds), FailedPrecondition when the engine is not running.
  Status SetTuning(int64_t fusion_bytes, int64_t scheduling_credit);
  // The cycle time (TFPS_CYCLE_US) while training runs: 0..kMaxCycleUs microseconds a
  // fusion batch may wait for more partitions. CycleUs: -1 when not initialised.
  Status SetCycle(int64_t cycle_us);
  int64_t CycleUs();
  // The values in use: {fusion bytes, credit}; {-1, -1} when the engine is not running.
  std::pair<int64_t, int64_t> Tuning();
  // This worker's hierarchical aggregation, or null (join.cc).
  std::shared_ptr<Hierarchical> hierarchical_aggregation() {
    std::lock_guard<std::mutex> lock(loop_mu_);
    return hierarchical_;
  }

  // Thread-safe. Fail the request at once when the engine is not running.
  void Enqueue(PushPullRequest request);
  // Enqueues all at once, so they start together (and small ones can share messages).
  void EnqueueAll(std::vector<PushPullRequest> requests);
  void EnqueueGather(GatherRequest request);
  // Whether `request` may hand device memory (request.device >= 0): its host sums GPU
  // tensors with NCCL and the request goes the hierarchical way (device_reduce.cc).
  bool TakesDeviceTensor(const PushPullRequest& request);
  // Whether the engine would compress `request` (its codec, else TFPS_COMPRESSION; not
  // through hierarchical aggregation), so a GPU kernel may encode it on the device
  // (request.device_codec); *spec gets the codec. False when the engine is not running.
  bool EncodesOnDevice(const PushPullRequest& request, CodecSpec* spec);

  ~Engine();

 private:
  // TFPS_HIERARCHICAL: the local workers' shared-memory reduction, once the loop runs.
  Status StartHierarchical(const Config& config, const ClusterView& view);

  class Loop;  // the engine thread's state and sockets (loop.h)

  Engine() = default;

  std::mutex mu_;       // serialises Init/Shutdown
  std::mutex loop_mu_;  // guards loop_ (Enqueue runs on any thread)
  std::shared_ptr<Loop> loop_;
  std::shared_ptr<Hierarchical> hierarchical_;  // guarded by loop_mu_; null: flat
  bool job_compresses_ = false;                 // TFPS_COMPRESSION is not none
  std::thread thread_;
  std::atomic<bool> initialized_{false};
  int rank_ = -1, size_ = 0, local_rank_ = -1, local_size_ = 0, num_servers_ = 0;
};

}  // namespace tfps

#endif  // TFPS_CC_ENGINE_ENGINE_H_

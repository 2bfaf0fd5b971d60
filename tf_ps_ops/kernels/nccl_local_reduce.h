// The LocalReduce of GPU tensors (local_reduce.h, device_reduce.h; docs/gpu.md): the local
// workers sum on their GPUs with NCCL (gpu/nccl_local.h), the leader copies the sum to pinned
// host memory for its push, and broadcasts the servers' answer back with NCCL. CUDA builds
// only; it lives with the kernels, the one unit that may use both the engine and the gpu
// unit (the gpu unit's checks library links no engine).
//
// NCCL runs collectives in the order they are called, the same order on every rank, while
// LocalReduce lets different tensors arrive in any order. So one thread per worker issues
// them, and the leader decides the order: before each collective it broadcasts a 256-byte
// header (which collective, tensor key, step, count, type, and for an answer the leader's
// error if any); a member waits for that tensor's call of its own (at most the timeout) and
// joins. A member whose graph differs (another count or type) fails the call and the group
// is aborted, so nothing waits forever. The first call creates the communicator on the
// tensor's GPU (ncclCommInitRank, bounded by the timeout).
#ifndef TFPS_KERNELS_NCCL_LOCAL_REDUCE_H_
#define TFPS_KERNELS_NCCL_LOCAL_REDUCE_H_

#include "tf_ps_ops/kernels/gpu_staging.h"  // TFPS_WITH_CUDA

#if TFPS_WITH_CUDA

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tf_ps_ops/cc/engine/local/local_reduce.h"
#include "tf_ps_ops/cc/gpu/nccl_local.h"

namespace tfps {

class NcclLocalReduce : public LocalReduce {
 public:
  // `id`: the leader's NCCL unique id; `ranks`: the global rank of each local rank.
  NcclLocalReduce(std::string id, std::vector<int> ranks, int local_rank, double timeout_s);
  ~NcclLocalReduce() override;

  int local_rank() const override { return local_rank_; }
  int local_size() const override { return static_cast<int>(ranks_.size()); }
  void ReduceToLeader(const LocalTensor& tensor, const void* input, ReduceDone done) override;
  void BroadcastFromLeader(const LocalTensor& tensor, const Status& result, void* output,
                           Done done) override;
  // Pending calls and every later one fail with `why` at once; a collective in flight ends
  // within the timeout (NCCL cannot be interrupted from another thread safely).
  void Fail(const Status& why) override;
  // Fails what is pending (Aborted) and joins the thread (a collective in flight ends within
  // the timeout), then frees the GPU and pinned buffers.
  void Shutdown() override;

 private:
  enum Kind : uint32_t { kReduce = 1, kBroadcast = 2 };
  struct Op {
    Kind kind = kReduce;
    LocalTensor tensor;
    const void* input = nullptr;
    void* output = nullptr;
    Status result;  // leader's broadcast: what became of the sum
    ReduceDone reduce_done;
    Done done;
  };
  struct Header;
  struct Scratch {  // the leader's per key: the sum on the GPU and on the host
    void* device = nullptr;
    void* host = nullptr;
    uint64_t bytes = 0;
  };

  void Add(Op op);
  void RunThread();
  // ...OnThread: the thread's state (group_, stream_, header buffers, scratch_).
  Status SetUpOnThread(int device);
  Status NextOnThread(Op* op);  // the next collective: the leader's pick or the member's match
  Status ExecuteOnThread(Op& op, void** sum, Status* answer);
  Status ScratchOnThread(const LocalTensor& t, Scratch** out);
  void ReleaseOnThread();
  std::string Describe(const LocalTensor& t, const char* what) const;

  const std::string id_;
  const std::vector<int> ranks_;
  const int local_rank_;
  const double timeout_s_;

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Op> pending_;  // guarded by mu_
  bool stopping_ = false;   // guarded by mu_
  Status failed_;           // guarded by mu_: Fail's reason
  std::thread thread_;

  std::unique_ptr<gpu::NcclLocalGroup> group_;
  Status broken_;  // once set, every later call fails with it
  int device_ = -1;
  void* stream_ = nullptr;       // cudaStream_t
  Header* host_header_ = nullptr;  // pinned
  void* device_header_ = nullptr;
  std::map<uint64_t, Scratch> scratch_;
};

// For the GPU push_pull kernel: the device `pointer` lives on, and an event recorded on
// `stream` (released with ReleaseReadyEvent once the call is done).
Status DeviceOfPointer(const void* pointer, int* device);
Status RecordReadyEvent(void* stream, void** event);
void ReleaseReadyEvent(void* event);

}  // namespace tfps

#endif  // TFPS_WITH_CUDA
#endif  // TFPS_KERNELS_NCCL_LOCAL_REDUCE_H_

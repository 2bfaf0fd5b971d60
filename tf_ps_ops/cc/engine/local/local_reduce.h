// Reduction among the workers of one host, for hierarchical aggregation (TFPS_HIERARCHICAL,
// docs/hierarchical.md): every local worker hands its tensor to the local leader (local
// rank 0), which sums them, talks to the servers alone and hands the result back.
//
// The interface is two asynchronous collectives so that another transport (NCCL on GPU
// hosts) can take the place of the shared-memory one (shm_local_reduce.h):
//   ReduceToLeader       every local worker -> the leader: the local sum
//   BroadcastFromLeader  the leader -> every local worker: the result, or why it failed
// Calls return at once; callbacks come on the implementation's thread. For one tensor
// name the caller runs steps one after another: step s+1 starts on a worker only after its
// BroadcastFromLeader of step s finished. Different names run concurrently, in any order.
#ifndef TFPS_CC_ENGINE_LOCAL_LOCAL_REDUCE_H_
#define TFPS_CC_ENGINE_LOCAL_LOCAL_REDUCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

// One call of one tensor, described identically on every local worker.
struct LocalTensor {
  std::string name;
  uint64_t key = 0;   // KeyOfName(name)
  uint64_t step = 0;  // 1-based call count of this name
  DType dtype = DType::kInvalid;
  uint64_t count = 0;  // elements
  int device = -1;     // >= 0: input/output are on this CUDA device (NCCL's LocalReduce)
  void* device_ready = nullptr;  // a cudaEvent_t after which input holds the data
  // PsAbortCollective: this worker cannot take part in the step (no input, no output);
  // `reason` goes to the leader, which fails the step on every local worker.
  bool abort = false;
  std::string reason;
  // A digest of the tensor's dims: workers whose tensors have the same size but another
  // shape disagree too (0: not compared).
  uint64_t shape_digest = 0;
  // hvd.join() (docs/hierarchical.md, "join()"). `joined`, leader, out: bit lr set for each
  // local rank counted as joined in this step (it added nothing, and the leader's push must
  // not list it); may be null. `serving`: a step the joined leader runs with zeros for its
  // members that still train.
  std::shared_ptr<uint32_t> joined;
  bool serving = false;
};

class LocalReduce {
 public:
  // `sum`: on the leader, count elements holding every local worker's input summed in
  // local-rank order, (((x0 + x1) + x2) + ...), valid until its BroadcastFromLeader of the
  // same step is done; nullptr on the others.
  using ReduceDone = std::function<void(const Status&, void* sum)>;
  using Done = std::function<void(const Status&)>;

  virtual ~LocalReduce() = default;

  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;

  // Every local worker calls it with its `input` (count elements, read before `done`).
  virtual void ReduceToLeader(const LocalTensor& tensor, const void* input,
                              ReduceDone done) = 0;
  // The leader passes `result` (what became of the sum: Ok, and the sum is the answer, or
  // the error) and gets the answer in `output` too; the others receive it into `output`
  // or fail with the leader's error.
  virtual void BroadcastFromLeader(const LocalTensor& tensor, const Status& result,
                                   void* output, Done done) = 0;
  // The job cannot go on (a member's failure, as the scheduler told it): fails what is
  // pending and every later call with `why`, at once. Without it a local worker that is
  // stopped (SIGSTOP) but alive would keep the others waiting (it is no stall).
  virtual void Fail(const Status& why) = 0;
  // Fails what is pending (Aborted), stops the thread, releases what it holds.
  virtual void Shutdown() = 0;

  // hvd.join() under hierarchical aggregation (docs/hierarchical.md, "join()").
  // BeginJoin: this worker has joined; until the join completes (EndJoin) the others count
  // it as zeros. *members_joined: whether every other local worker had joined already. On
  // the leader, `serve` (called on the implementation's thread) names a tensor key for
  // which a member that still trains handed over its input of the leader's next step:
  // the caller runs that step with zeros as the leader's input.
  using Serve = std::function<void(uint64_t key)>;
  virtual Status BeginJoin(Serve serve, bool* members_joined) {
    (void)serve;
    (void)members_joined;
    return FailedPrecondition("join() is not available with this local reduction (GPU "
                              "tensors through NCCL): set TFPS_HIERARCHICAL=0 to use join()");
  }
  // Leader, between BeginJoin and EndJoin: every other local worker has joined too.
  virtual bool MembersJoined() { return true; }
  // This worker's join returned (or failed): the leader stops serving, and each name's
  // next call pairs with the other local workers' again (a member that was counted as
  // zeros for some steps of a name takes up the leader's step count of it).
  virtual void EndJoin() {}
};

// dst[i] += src[i], exactly as ps_server's SumInto does for the types hierarchical
// aggregation takes (float32, float64, int32, int64; integers wrap). False for others.
bool LocalSumInto(DType dtype, void* dst, const void* src, uint64_t count);

}  // namespace tfps

#endif  // TFPS_CC_ENGINE_LOCAL_LOCAL_REDUCE_H_

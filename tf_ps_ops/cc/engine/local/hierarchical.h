// Hierarchical aggregation (TFPS_HIERARCHICAL, docs/hierarchical.md): the engine hands
// every eligible push_pull here instead of to its loop. The local workers sum it through
// a LocalReduce; the leader (local rank 0) pushes the local sum to the servers as one
// kFlagHierarchical push that stands for all of them, and hands the answer back.
//
// A tensor larger than kChunkBytes goes as chunks, each its own name ("w#chunk 2/5") and
// so its own server key, so that the network carries one chunk while the next is summed
// locally. Steps of one name run one after another on each worker (a name's next call
// waits in a queue here), which is what LocalReduce asks; different names (and chunks) run
// concurrently. A worker alone on its host (or on one with more workers than a push can
// list) has no LocalReduce: it pushes its own chunks, so every worker of the job cuts a
// tensor the same way and uses the same keys.
#ifndef TFPS_CC_ENGINE_LOCAL_HIERARCHICAL_H_
#define TFPS_CC_ENGINE_LOCAL_HIERARCHICAL_H_

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tf_ps_ops/cc/engine/engine.h"
#include "tf_ps_ops/cc/engine/local/local_reduce.h"

namespace tfps {

class Hierarchical {
 public:
  using Submit = std::function<void(PushPullRequest)>;  // to the engine loop

  static constexpr uint64_t kChunkBytes = uint64_t{4} << 20;

  // `ranks`: the global rank of each local rank; `submit` sends the leader's push.
  // `reduce` null: this worker pushes alone (ranks = {its rank}).
  Hierarchical(std::unique_ptr<LocalReduce> reduce, std::vector<int> ranks, Submit submit);

  // Whether a request goes the hierarchical way: a dense summation (no PS mode, no
  // broadcast, no compression) of a type the local sum adds exactly as the server does.
  // The same answer on every worker for the same name, so all of a host agree.
  static bool Eligible(const PushPullRequest& request, bool job_compresses);

  void Enqueue(PushPullRequest request);
  // PsAbortCollective (kFlagAbortRound) of a name this worker has aggregated locally
  // before: each of its names (chunks) gets a local step that fails on every local worker
  // (the leader's FailedPrecondition), and the leader fails the servers' rounds too.
  // False, and `request` untouched, for a name never seen here (it goes flat).
  bool TakesAbort(const std::string& name);
  void EnqueueAbort(PushPullRequest request);
  // hvd.join() (hierarchical_join.cc, docs/hierarchical.md "join()"): this worker has
  // joined; the other local workers count it as zeros until EndJoin. *leads: this is the
  // local leader and some member still trains, so it keeps running the steps those members
  // hand over, with zeros as its input, for names it called before; its join then goes to
  // the servers with kFlagJoinLeads, and MembersJoined() says when to release it.
  Status BeginJoin(bool* leads);
  bool MembersJoined();
  void EndJoin();
  // The job cannot go on: local reductions waiting for a (stopped) local worker fail now.
  void Fail(const Status& why);
  void Shutdown();

  // GPU tensors (request.device >= 0) go to `reduce` (NCCL, device_reduce.h) instead.
  void SetDeviceReduce(std::unique_ptr<LocalReduce> reduce) { device_reduce_ = std::move(reduce); }
  bool takes_device_tensors() const { return device_reduce_ != nullptr; }

 private:
  struct Call;
  void EnqueueChunk(PushPullRequest request);
  // The name's next call, now running, or nullptr when one runs or none waits (mu_ held).
  std::shared_ptr<Call> NextLocked(const std::string& name);
  void Run(std::shared_ptr<Call> call);
  void Finish(std::shared_ptr<Call> call, const Status& status);
  // A joined leader's step of the name with key `key`, zeros as its input (on the local
  // reduction's thread).
  void ServeJoined(uint64_t key);
  // Remembers a CPU call, for ServeJoined.
  void RememberLocked(const PushPullRequest& request);

  std::unique_ptr<LocalReduce> reduce_;
  std::unique_ptr<LocalReduce> device_reduce_;  // set before the first Enqueue; may be null
  const std::vector<int> ranks_;
  const Submit submit_;
  std::mutex mu_;
  struct Queue {
    uint64_t steps = 0;
    bool running = false;
    std::deque<PushPullRequest> waiting;
  };
  std::unordered_map<std::string, Queue> queues_;  // guarded by mu_
  // Per name aggregated on the CPU: the chunks of its last call (1: whole). Guarded by mu_.
  std::unordered_map<std::string, uint64_t> chunks_;
  // Per key (name or chunk) aggregated on the CPU: its last call (name, dtype, count, dims,
  // priority; no data), which a joined leader repeats with zeros. Guarded by mu_.
  std::unordered_map<uint64_t, PushPullRequest> known_;
  bool device_tensors_ = false;  // guarded by mu_: a GPU tensor went through here
};

}  // namespace tfps

#endif  // TFPS_CC_ENGINE_LOCAL_HIERARCHICAL_H_

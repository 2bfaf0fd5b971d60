#include "tf_ps_ops/cc/engine/hierarchical.h"

namespace tfps {

struct Hierarchical::Call {
  PushPullRequest request;
  LocalTensor tensor;
};

Hierarchical::Hierarchical(std::unique_ptr<LocalReduce> reduce, std::vector<int> ranks,
                           Submit submit)
    : reduce_(std::move(reduce)), ranks_(std::move(ranks)), submit_(std::move(submit)) {}

bool Hierarchical::Eligible(const PushPullRequest& r, bool job_compresses) {
  const bool summable = r.dtype == DType::kFloat32 || r.dtype == DType::kFloat64 ||
                        r.dtype == DType::kInt32 || r.dtype == DType::kInt64;
  const bool compressed = r.codec.has_value() ? r.codec->id != CodecId::kNone
                                              : job_compresses && r.dtype == DType::kFloat32;
  return summable && !compressed && r.flags == 0 && r.root_rank < 0 && r.rows == nullptr;
}

void Hierarchical::Enqueue(PushPullRequest request) {
  std::shared_ptr<Call> next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string name = request.name;
    queues_[name].waiting.push_back(std::move(request));
    next = NextLocked(name);
  }
  if (next) Run(next);  // not under mu_: a callback may come at once and take it
}

std::shared_ptr<Hierarchical::Call> Hierarchical::NextLocked(const std::string& name) {
  Queue& q = queues_[name];
  if (q.running || q.waiting.empty()) return nullptr;
  q.running = true;
  auto call = std::make_shared<Call>();
  call->request = std::move(q.waiting.front());
  q.waiting.pop_front();
  const PushPullRequest& r = call->request;
  call->tensor = LocalTensor{r.name, KeyOfName(r.name), ++q.steps, r.dtype, r.count};
  return call;
}

void Hierarchical::Run(std::shared_ptr<Call> call) {
  const bool leader = reduce_->local_rank() == 0;
  reduce_->ReduceToLeader(call->tensor, call->request.input, [this, call, leader](
                                                                 const Status& s, void* sum) {
    if (!leader) {  // handed over: wait for the answer (or fail, the leader will too)
      if (!s.ok()) {
        Finish(call, s);
        return;
      }
      reduce_->BroadcastFromLeader(call->tensor, Status::Ok(), call->request.output,
                                   [this, call](const Status& got) { Finish(call, got); });
      return;
    }
    auto broadcast = [this, call](const Status& result) {
      reduce_->BroadcastFromLeader(call->tensor, result, call->request.output,
                                   [this, call](const Status& got) { Finish(call, got); });
    };
    if (!s.ok()) {
      broadcast(s);
      return;
    }
    // The local sum goes to the servers as one push standing for every local rank; the
    // answer comes back into the same shared memory, which the broadcast hands out.
    const PushPullRequest& r = call->request;
    PushPullRequest push;
    push.name = r.name;
    push.dtype = r.dtype;
    push.dims = r.dims;
    push.count = r.count;
    push.input = sum;
    push.output = sum;
    push.flags = kFlagHierarchical;
    push.params.assign(ranks_.begin(), ranks_.end());
    push.priority = r.priority;
    push.codec = CodecSpec();  // none: the local sum travels as it is
    push.done = broadcast;
    submit_(std::move(push));
  });
}

void Hierarchical::Finish(std::shared_ptr<Call> call, const Status& status) {
  std::shared_ptr<Call> next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Queue& q = queues_[call->request.name];
    q.running = false;
    next = NextLocked(call->request.name);
  }
  auto done = std::move(call->request.done);
  done(status.ok() ? status
                   : status.WithPrefix("push_pull of tensor '" + call->request.name + "' (call " +
                                       std::to_string(call->tensor.step) + ", hierarchical): "));
  if (next) Run(next);
}

void Hierarchical::Shutdown() { reduce_->Shutdown(); }

}  // namespace tfps

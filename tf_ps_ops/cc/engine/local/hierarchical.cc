#include "tf_ps_ops/cc/engine/local/hierarchical.h"

#include <algorithm>

#include "tf_ps_ops/cc/engine/abort_request.h"

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
  // Min/max/product: the local leader would have to reduce with that op; they go direct.
  return summable && !compressed && r.flags == 0 && r.root_rank < 0 && r.rows == nullptr &&
         r.reduce_op == ReduceOp::kSum && r.members.empty() && !r.join;
}

namespace {

// What the chunks of one request share: the first error, and who finishes it.
struct Chunked {
  std::mutex mu;
  int remaining = 0;
  Status status;
  std::function<void(const Status&)> done;
};

// `done` shared by the `chunks` chunks of one request: the returned function is each
// chunk's `done`; `done` runs once, when the last chunk finished, with the first error.
std::function<void(const Status&)> SharedDone(std::function<void(const Status&)> done,
                                              uint64_t chunks) {
  auto shared = std::make_shared<Chunked>();
  shared->remaining = static_cast<int>(chunks);
  shared->done = std::move(done);
  return [shared](const Status& s) {
    std::function<void(const Status&)> finish;
    Status status;
    {
      std::lock_guard<std::mutex> lock(shared->mu);
      if (!s.ok() && shared->status.ok()) shared->status = s;
      if (--shared->remaining > 0) return;
      finish = std::move(shared->done);
      status = shared->status;
    }
    finish(status);
  };
}

// Chunk i (0-based) of `chunks`: its own name, so its own key, on every worker.
std::string ChunkName(const std::string& name, uint64_t i, uint64_t chunks) {
  return name + "#chunk " + std::to_string(i + 1) + "/" + std::to_string(chunks);
}

}  // namespace

void Hierarchical::Enqueue(PushPullRequest request) {
  const size_t elem = DTypeSize(request.dtype);
  const uint64_t per_chunk = std::max<uint64_t>(1, kChunkBytes / elem);
  const uint64_t chunks = std::max<uint64_t>(1, (request.count + per_chunk - 1) / per_chunk);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (request.device < 0) {
      chunks_[request.name] = chunks;
    } else {
      device_tensors_ = true;
    }
  }
  if (chunks == 1) {
    EnqueueChunk(std::move(request));
    return;
  }
  const auto chunk_done = SharedDone(std::move(request.done), chunks);
  for (uint64_t i = 0; i < chunks; ++i) {
    PushPullRequest chunk;
    const uint64_t first = i * per_chunk;
    chunk.name = ChunkName(request.name, i, chunks);
    chunk.dtype = request.dtype;
    chunk.count = std::min(per_chunk, request.count - first);
    chunk.dims = {static_cast<int64_t>(chunk.count)};
    chunk.input = static_cast<const char*>(request.input) + first * elem;
    chunk.output = static_cast<char*>(request.output) + first * elem;
    chunk.priority = request.priority;
    chunk.input_holder = request.input_holder;
    chunk.enqueued = request.enqueued;
    chunk.device = request.device;
    chunk.device_ready = request.device_ready;
    chunk.done = chunk_done;
    EnqueueChunk(std::move(chunk));
  }
}

bool Hierarchical::TakesAbort(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  return chunks_.count(name) != 0;
}

void Hierarchical::EnqueueAbort(PushPullRequest request) {
  uint64_t chunks = 1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    chunks = chunks_[request.name];
  }
  if (chunks <= 1) {
    EnqueueChunk(std::move(request));
    return;
  }
  const auto chunk_done = SharedDone(std::move(request.done), chunks);
  for (uint64_t i = 0; i < chunks; ++i) {
    PushPullRequest chunk = request;
    chunk.name = ChunkName(request.name, i, chunks);
    chunk.done = chunk_done;
    EnqueueChunk(std::move(chunk));
  }
}

void Hierarchical::EnqueueChunk(PushPullRequest request) {
  std::shared_ptr<Call> next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string name = request.name;
    RememberLocked(request);
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
  call->tensor.name = r.name;
  call->tensor.key = KeyOfName(r.name);
  call->tensor.step = ++q.steps;
  call->tensor.dtype = r.dtype;
  call->tensor.count = r.count;
  uint64_t digest = 1469598103934665603ull;  // FNV-1a over the dims (a chunk's are its own)
  for (int64_t d : r.dims) digest = (digest ^ static_cast<uint64_t>(d)) * 1099511628211ull;
  call->tensor.shape_digest = digest | 1;
  call->tensor.device = r.device;
  call->tensor.device_ready = r.device_ready;
  call->tensor.joined = std::make_shared<uint32_t>(0);
  call->tensor.serving = r.join_zeros;
  if ((r.flags & kFlagAbortRound) != 0) {
    call->tensor.abort = true;
    call->tensor.reason.assign(static_cast<const char*>(r.input), r.count);
    call->tensor.dtype = DType::kUInt8;
    call->tensor.count = 0;
  }
  return call;
}

namespace {

// The servers' name of a local sum: a key of its own, so that the rounds it stands in for
// are numbered apart from the flat pushes of the same name (the Horovod shim's eager calls
// all go under 'push_pull.eager', float16 ones flat, float32 ones here; the members push
// none of these, so a shared count would differ between leader and members).
std::string ServerName(const std::string& name) { return name + "#local sum"; }

// The ranks a leader's push stands for: its host's, less the members counted as joined
// (join()), whom the servers count through their own join bookkeeping.
std::vector<int> Pushing(const std::vector<int>& ranks, uint32_t joined) {
  std::vector<int> out;
  for (size_t lr = 0; lr < ranks.size(); ++lr) {
    if (lr == 0 || (joined & (1u << lr)) == 0) out.push_back(ranks[lr]);
  }
  return out;
}

PushPullRequest LeaderPush(const PushPullRequest& r, const std::vector<int>& ranks) {
  PushPullRequest push;
  push.name = ServerName(r.name);
  push.dtype = r.dtype;
  push.dims = r.dims;
  push.count = r.count;
  push.flags = kFlagHierarchical;
  push.params.assign(ranks.begin(), ranks.end());
  push.priority = r.priority;
  push.codec = CodecSpec();  // none: the local sum travels as it is
  return push;
}

// The servers' rounds of a local step that failed here (the error answered on this host):
// an abort standing for every local rank, so that other hosts fail at once too.
PushPullRequest AbortPush(const std::string& name, const std::string& why,
                          const std::vector<int>& ranks) {
  // The servers' error is the expected answer.
  PushPullRequest push = AbortRoundRequest(ServerName(name), why, [](const Status&) {});
  push.flags |= kFlagHierarchical;
  push.params.assign(ranks.begin(), ranks.end());
  return push;
}

}  // namespace

void Hierarchical::Run(std::shared_ptr<Call> call) {
  if (!reduce_ && call->tensor.abort) {  // alone: the abort goes to the servers as it is
    submit_(AbortPush(call->request.name, call->tensor.reason, ranks_));
    Finish(call, Status::Ok());
    return;
  }
  if (!reduce_) {  // alone: its own data, straight to the servers
    PushPullRequest push = LeaderPush(call->request, ranks_);
    push.input = call->request.input;
    push.output = call->request.output;
    push.input_holder = call->request.input_holder;
    push.done = [this, call](const Status& got) { Finish(call, got); };
    submit_(std::move(push));
    return;
  }
  LocalReduce* reduce = call->tensor.device >= 0 ? device_reduce_.get() : reduce_.get();
  const bool leader = reduce->local_rank() == 0;
  reduce->ReduceToLeader(call->tensor, call->request.input, [this, call, leader, reduce](
                                                                const Status& s, void* sum) {
    if (!leader) {  // handed over: wait for the answer (or fail, the leader will too)
      if (!s.ok()) {
        Finish(call, s);
        return;
      }
      reduce->BroadcastFromLeader(call->tensor, Status::Ok(), call->request.output,
                                   [this, call](const Status& got) { Finish(call, got); });
      return;
    }
    auto broadcast = [this, call, reduce](const Status& result) {
      reduce->BroadcastFromLeader(call->tensor, result, call->request.output,
                                   [this, call](const Status& got) { Finish(call, got); });
    };
    if (!s.ok()) {
      // Answered with an error (not a step withdrawn for lack of a local worker, nor a
      // shutdown): the servers' rounds of this step are failed too, for every host.
      if (s.code() != Code::kDeadlineExceeded && s.code() != Code::kAborted) {
        submit_(AbortPush(call->request.name, s.message(),
                          Pushing(ranks_, *call->tensor.joined)));
      }
      broadcast(s);
      return;
    }
    // The local sum goes to the servers as one push standing for every local rank; the
    // answer comes back into the same shared memory, which the broadcast hands out.
    PushPullRequest push = LeaderPush(call->request, Pushing(ranks_, *call->tensor.joined));
    push.input = sum;
    push.output = sum;
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

void Hierarchical::Fail(const Status& why) {
  if (reduce_) reduce_->Fail(why);
  if (device_reduce_) device_reduce_->Fail(why);
}

void Hierarchical::Shutdown() {
  if (reduce_) reduce_->Shutdown();
  if (device_reduce_) device_reduce_->Shutdown();
}

}  // namespace tfps

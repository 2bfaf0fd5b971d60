#include "tf_ps_ops/cc/engine/local/shm_local_reduce.h"

#include <cstdio>
#include <cstring>

namespace tfps {

ShmLocalReduce::ShmLocalReduce(std::string token, std::vector<int> ranks, int local_rank,
                               const StallPolicy& stall)
    : token_(std::move(token)), ranks_(std::move(ranks)), local_rank_(local_rank),
      stall_(stall) {
  thread_ = std::thread([this] { RunPolling(); });
}

ShmLocalReduce::~ShmLocalReduce() { Shutdown(); }

namespace {
// "tensor 'x' (step 3)": what a stall warning names.
std::string Named(const LocalTensor& t) {
  return "tensor '" + t.name + "' (step " + std::to_string(t.step) + ")";
}
}  // namespace

Status ShmLocalReduce::NewToken(std::string* token) { return NewShmToken(token); }

std::string ShmLocalReduce::Describe(int local_rank) const {
  return "local rank " + std::to_string(local_rank) + " (rank " +
         std::to_string(ranks_[local_rank]) + ")";
}

void ShmLocalReduce::Add(std::function<std::optional<Status>()> step,
                         std::function<void(const Status&)> finish,
                         std::function<void()> on_timeout, const std::string& what,
                         std::optional<uint64_t> key) {
  Task task{std::move(step), std::move(finish), Clock::now(), std::move(on_timeout), what, 0,
            key};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      incoming_.push_back(std::move(task));
      wake_.notify_one();
      return;
    }
  }
  task.finish(Aborted("tf_ps_ops is shutting down; the local reduction was not started"));
}

void ShmLocalReduce::ReduceToLeader(const LocalTensor& t, const void* input, ReduceDone done) {
  auto sum = std::make_shared<void*>(nullptr);
  auto finish = [done, sum](const Status& s) { done(s, s.ok() ? *sum : nullptr); };
  if (local_rank_ == 0) {
    // Timed out: no member's input was taken (the leader takes all at once), so the step is
    // withdrawn, and is not answered; members that handed over time out and withdraw too.
    Add([this, t, input, sum] { return LeaderReduceOnPoll(MappedOnPoll(t), input, sum.get()); },
        finish, [this, t] { WithdrawLeaderStepOnPoll(t.key, t.step); }, Named(t), t.key);
    return;
  }
  // A handover that fails or times out hands nothing over: its number is used again.
  auto withdraw = [this, t] { ++segments_[t.key].skipped; };
  Add([this, t, input, withdraw]() -> std::optional<Status> {
        if (!ResolvePendingOnPoll(t.key)) return std::nullopt;
        AlignAfterJoinOnPoll(t);
        const LocalTensor m = MappedOnPoll(t);
        ShmSegment* own = nullptr;
        Status s = LeaderCanServeOnPoll(m, false);
        if (s.ok()) s = OwnOnPoll(m, &own);
        if (!s.ok()) {
          withdraw();
          return s;
        }
        // Every earlier step of the name is done here (the caller orders them), also those
        // a join counted this worker as zeros in: the leader need not wait for their acks.
        if (own->header()->ack_step.load(std::memory_order_acquire) + 1 < m.step) {
          own->header()->ack_step.store(m.step - 1, std::memory_order_release);
        }
        if (m.abort) {  // no input: the reason, for the leader to fail the step with
          std::snprintf(own->header()->error, sizeof(own->header()->error), "%s",
                        m.reason.c_str());
          own->header()->aborted_step.store(m.step, std::memory_order_release);
          own->header()->ready_step.store(m.step, std::memory_order_release);
          return Status::Ok();
        }
        // `ready_step` is not m here (a withdrawn step left 0, a summed one kCommitted), so
        // the leader reads nothing until the store.
        std::memcpy(own->data(), input, m.count * DTypeSize(m.dtype));
        own->header()->shape_digest.store(m.shape_digest, std::memory_order_relaxed);
        own->header()->ready_step.store(m.step, std::memory_order_release);
        return Status::Ok();
      },
      finish, withdraw, Named(t));
}

bool ShmLocalReduce::ResolvePendingOnPoll(uint64_t key) {
  Segments& segs = segments_[key];
  if (segs.pending == 0) return true;
  std::atomic<uint64_t>& ready = segs.own->header()->ready_step;
  uint64_t value = ready.load(std::memory_order_acquire);
  if (value == (segs.pending | kCommitted)) {  // summed: the step is done on both sides
    segs.own->header()->ack_step.store(segs.pending, std::memory_order_release);
  } else if (value == segs.pending && ready.compare_exchange_strong(value, 0,
                                                                    std::memory_order_acq_rel)) {
    ++segs.skipped;  // given back, and withdrawn now
  } else {
    return false;  // still being taken (or taken again since): the leader reads our input
  }
  segs.pending = 0;
  return true;
}

void ShmLocalReduce::WithdrawLeaderStepOnPoll(uint64_t key, uint64_t caller_step) {
  Segments& segs = segments_[key];
  segs.withdrawn_step = caller_step;
  ++segs.skipped;
  segs.served_step = 0;  // a joined leader serves that step again when asked
}

LocalTensor ShmLocalReduce::MappedOnPoll(const LocalTensor& t) {
  LocalTensor m = t;
  m.step = t.step - segments_[t.key].skipped;
  return m;
}

void ShmLocalReduce::BroadcastFromLeader(const LocalTensor& t, const Status& result,
                                         void* output, Done done) {
  if (local_rank_ != 0) {
    // Timed out: withdraw the input unless the leader took it (then this step counts as
    // done on both sides, and the leader may overwrite its answer).
    Add([this, t, output] { return MemberReceiveOnPoll(MappedOnPoll(t), output); },
        std::move(done), [this, t] {
          Segments& segs = segments_[t.key];
          if (!segs.own) return;
          // Undecided while the leader takes it: settled before this name's next handover.
          segs.pending = MappedOnPoll(t).step;
          ResolvePendingOnPoll(t.key);
        },
        Named(t));
    return;
  }
  Add([this, t0 = t, result, output]() -> std::optional<Status> {
        if (segments_[t0.key].withdrawn_step == t0.step) return result;  // not answered
        const LocalTensor t = MappedOnPoll(t0);
        ShmSegment* own = nullptr;
        TFPS_RETURN_IF_ERROR(OwnOnPoll(t, &own));
        ShmHeader* h = own->header();
        if (result.ok() && output != own->data()) {
          std::memcpy(output, own->data(), t.count * DTypeSize(t.dtype));
        }
        std::snprintf(h->error, sizeof(h->error), "%s", result.message().c_str());
        h->result_code.store(static_cast<uint32_t>(result.code()), std::memory_order_relaxed);
        h->result_step.store(t.step, std::memory_order_release);
        return result;
      },
      std::move(done), nullptr, Named(t));
}
std::optional<Status> ShmLocalReduce::MemberReceiveOnPoll(const LocalTensor& t, void* output) {
  ShmSegment* leader = nullptr;
  TFPS_RETURN_IF_ERROR(PeerOnPoll(t, 0, &leader));
  if (leader == nullptr || leader->header()->result_step.load(std::memory_order_acquire) != t.step) {
    // A leader that has joined serves only names it called before: withdraw the input
    // (unless it was taken meanwhile) and fail, instead of waiting out TFPS_TIMEOUT.
    Status serve = check_liveness_ ? LeaderCanServeOnPoll(t, false) : Status::Ok();
    ShmSegment* mine = segments_[t.key].own.get();
    uint64_t handed = t.step;
    if (!serve.ok() && mine != nullptr &&
        mine->header()->ready_step.compare_exchange_strong(handed, 0,
                                                           std::memory_order_acq_rel)) {
      ++segments_[t.key].skipped;
      return serve;
    }
    if (leader != nullptr) TFPS_RETURN_IF_ERROR(PeerAlive(*leader, 0, t));
    return std::nullopt;
  }
  const ShmHeader* h = leader->header();
  // The leader summed this member's input, so it has the segment mapped: no one needs the
  // memfd. (An answer without the inputs, an abort's or a disagreement's, may come before
  // the leader mapped it: then the memfd stays open for the next step.)
  ShmSegment* mine = segments_[t.key].own.get();
  if (mine != nullptr &&
      mine->header()->ready_step.load(std::memory_order_acquire) == (t.step | kCommitted)) {
    mine->CloseFd();
  }
  auto code = static_cast<Code>(h->result_code.load(std::memory_order_relaxed));
  switch (code) {  // shared memory is input too: only codes that exist
    case Code::kOk: case Code::kInvalidArgument: case Code::kDeadlineExceeded:
    case Code::kAlreadyExists: case Code::kFailedPrecondition: case Code::kAborted:
    case Code::kInternal: case Code::kUnavailable: case Code::kResourceExhausted:
      break;
    default:
      code = Code::kInternal;
  }
  // Read (an error too): the leader may put the next step's sum in its place.
  segments_[t.key].own->header()->ack_step.store(t.step, std::memory_order_release);
  if (code != Code::kOk) {
    char text[sizeof(h->error)];
    std::memcpy(text, h->error, sizeof(text));
    text[sizeof(text) - 1] = '\0';
    return Status(code, "the local leader, " + Describe(0) + ", failed: " + text);
  }
  if (t.abort) return Status::Ok();  // nothing to receive (a leader would have failed it)
  if (!Fits(*leader, t)) return ShapeMismatch(*leader, 0, t);
  std::memcpy(output, leader->data(), t.count * DTypeSize(t.dtype));
  return Status::Ok();
}

void ShmLocalReduce::RunPolling() {
  std::list<Task> tasks;
  Status failed;
  int idle_rounds = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (tasks.empty() && incoming_.empty() && !stopping_) {
        // A joined leader watches its members' segments for steps to serve.
        wake_.wait_for(lock, std::chrono::milliseconds(serve_ ? 1 : 100));
      }
      tasks.splice(tasks.end(), incoming_);
      if (stopping_) break;
      failed = failed_;
    }
    if (!failed.ok()) {  // the job cannot go on: nothing waits any more
      for (Task& task : tasks) task.finish(failed);
      tasks.clear();
      continue;
    }
    bool progressed = false;
    const auto now = Clock::now();
    check_liveness_ = now - last_liveness_check_ > std::chrono::milliseconds(50);
    if (check_liveness_) last_liveness_check_ = now;
    for (auto it = tasks.begin(); it != tasks.end();) {
      std::optional<Status> result = it->step();
      bool timed_out = false;
      if (!result) {
        // A local peer whose process is gone failed the step already (step()): one that
        // is still missing is alive, and slow.
        result = StalledOnPoll(*it, now);
        timed_out = result.has_value();
      }
      if (!result) {
        ++it;
        continue;
      }
      if (timed_out && it->on_timeout) it->on_timeout();
      progressed = true;
      it->finish(*result);
      it = tasks.erase(it);
    }
    if (serve_) ServeJoinedOnPoll();
    if (local_rank_ == 0 && stall_.warning_s > 0 &&
        now - last_behind_check_ > std::chrono::seconds(1)) {
      last_behind_check_ = now;
      WarnLeaderBehindOnPoll(tasks, now);
    }
    // Spin briefly while work is pending, then sleep longer the longer nothing happens: a
    // member waits a whole server round trip for its answer, and must not burn a core
    // meanwhile (the latency added stays under 0.5 ms, against steps of milliseconds).
    idle_rounds = progressed ? 0 : idle_rounds + 1;
    if (!tasks.empty() && idle_rounds > 32) {
      const int micros = idle_rounds < 100 ? 20 : idle_rounds < 300 ? 100 : 500;
      std::this_thread::sleep_for(std::chrono::microseconds(micros));
    }
  }
  const Status aborted = Aborted("tf_ps_ops was shut down during a local reduction");
  for (Task& task : tasks) task.finish(aborted);
  UnlinkAllOnPoll();
}
void ShmLocalReduce::Fail(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_.ok()) failed_ = why;
  wake_.notify_one();
}

void ShmLocalReduce::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
  std::list<Task> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(incoming_);
  }
  const Status aborted = Aborted("tf_ps_ops was shut down during a local reduction");
  for (Task& task : left) task.finish(aborted);
}

}  // namespace tfps

#include "tf_ps_ops/cc/engine/local/shm_local_reduce.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/common/metrics.h"

namespace tfps {

namespace {
// Set in a member's `ready_step` by the leader: kTaken while it takes the members' inputs
// of that step (all or none: it may still give a member's back, restoring the step), then
// kCommitted once it summed them. A member can withdraw only an untaken input; one whose
// wait times out while its input is kTaken leaves the step undecided (Segments::pending)
// and its next call of the name waits for the leader's decision before it writes again.
constexpr uint64_t kTaken = uint64_t{1} << 63;
constexpr uint64_t kCommitted = uint64_t{1} << 62;

std::atomic<int64_t> take_pause_us{0};  // SetTakePauseForTesting
}  // namespace

void ShmLocalReduce::SetTakePauseForTesting(double seconds) {
  take_pause_us.store(static_cast<int64_t>(seconds * 1e6), std::memory_order_relaxed);
}

bool LocalSumInto(DType dtype, void* dst, const void* src, uint64_t count) {
  switch (dtype) {
    case DType::kFloat32: {
      auto* d = static_cast<float*>(dst);
      const auto* s = static_cast<const float*>(src);
      for (uint64_t i = 0; i < count; ++i) d[i] += s[i];
      return true;
    }
    case DType::kFloat64: {
      auto* d = static_cast<double*>(dst);
      const auto* s = static_cast<const double*>(src);
      for (uint64_t i = 0; i < count; ++i) d[i] += s[i];
      return true;
    }
    case DType::kInt32: {  // unsigned: wraps around, as the server's sum does
      auto* d = static_cast<uint32_t*>(dst);
      const auto* s = static_cast<const uint32_t*>(src);
      for (uint64_t i = 0; i < count; ++i) d[i] += s[i];
      return true;
    }
    case DType::kInt64: {
      auto* d = static_cast<uint64_t*>(dst);
      const auto* s = static_cast<const uint64_t*>(src);
      for (uint64_t i = 0; i < count; ++i) d[i] += s[i];
      return true;
    }
    default:
      return false;
  }
}

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

std::string ShmLocalReduce::SegmentName(uint64_t key, int local_rank) const {
  char key_hex[17];
  std::snprintf(key_hex, sizeof(key_hex), "%016llx", static_cast<unsigned long long>(key));
  return "/tfps-" + token_ + "-" + key_hex + "-" + std::to_string(local_rank);
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

Status ShmLocalReduce::OwnOnPoll(const LocalTensor& t, ShmSegment** own) {
  Segments& segs = segments_[t.key];
  const uint64_t bytes = t.count * DTypeSize(t.dtype);
  uint64_t acked = 0;
  uint64_t answered = 0;  // the leader's last answer, which a member re-aligns to after a join
  segs.name = t.name;
  if (segs.own && !Fits(*segs.own, t) && !t.abort) {  // an abort fits any segment
    // The name's shape changed (e.g. the Horovod shim's one name for every eager call):
    // a new segment under the same name, which peers re-open when they see this mark.
    // Its peers are done with the old one (the caller finished the name's last step).
    acked = segs.own->header()->ack_step.load(std::memory_order_acquire);
    answered = segs.own->header()->result_step.load(std::memory_order_acquire);
    segs.own->header()->superseded.store(1, std::memory_order_release);
    segs.own->Unlink();
    segs.own.reset();
  }
  if (!segs.own) {
    ShmSegment* created = nullptr;
    TFPS_RETURN_IF_ERROR(ShmSegment::Create(SegmentName(t.key, local_rank_), bytes,
                                            static_cast<uint32_t>(t.dtype), local_rank_,
                                            &created));
    created->header()->ack_step.store(acked, std::memory_order_release);
    created->header()->result_step.store(answered, std::memory_order_release);
    segs.own.reset(created);
    segs.peers.resize(ranks_.size());
  }
  *own = segs.own.get();
  return Status::Ok();
}

Status ShmLocalReduce::AbortStatus(int local_rank, const std::string& reason) const {
  // The words of the servers' abort (sum_rounds.cc), which callers match.
  return FailedPrecondition("worker " + std::to_string(ranks_[local_rank]) +
                            " could not take part in this collective: " + reason +
                            " (local rank " + std::to_string(local_rank) +
                            ", hierarchical aggregation); the next collective can proceed");
}

bool ShmLocalReduce::Fits(const ShmSegment& segment, const LocalTensor& t) {
  return segment.capacity() == t.count * DTypeSize(t.dtype) &&
         segment.header()->dtype == static_cast<uint32_t>(t.dtype);
}

Status ShmLocalReduce::ShapeMismatch(const ShmSegment& peer, int local_rank,
                                     const LocalTensor& t) const {
  // FailedPrecondition, as the servers report workers that disagree (and Horovod does).
  const uint32_t dtype = peer.header()->dtype;
  if (dtype != static_cast<uint32_t>(t.dtype)) {
    return FailedPrecondition(Describe(local_rank) + " has tensor '" + t.name + "' as " +
                           DTypeName(static_cast<DType>(dtype)) + ", this worker as " +
                           DTypeName(t.dtype) + " (call " + std::to_string(t.step) + ")");
  }
  return FailedPrecondition(Describe(local_rank) + ", tensor '" + t.name + "' (call " +
                         std::to_string(t.step) + "): its tensor has " +
                         std::to_string(peer.capacity()) + " bytes, this worker's " +
                         std::to_string(t.count * DTypeSize(t.dtype)) +
                         ": do the local workers disagree on the tensor's shape or dtype?");
}

Status ShmLocalReduce::PeerOnPoll(const LocalTensor& t, int local_rank, ShmSegment** peer) {
  Segments& segs = segments_[t.key];
  segs.peers.resize(ranks_.size());
  std::unique_ptr<ShmSegment>& slot = segs.peers[local_rank];
  if (slot && slot->header()->superseded.load(std::memory_order_acquire) != 0) {
    slot.reset();  // its owner made a new one for another shape, under the same name
  }
  if (!slot) {
    ShmSegment* opened = nullptr;
    Status s = ShmSegment::Open(SegmentName(t.key, local_rank), kShmAnySize, &opened);
    if (!s.ok()) {
      return s.WithPrefix(Describe(local_rank) + ", tensor '" + t.name + "' (hierarchical "
                          "aggregation; TFPS_HIERARCHICAL=0 turns it off): ");
    }
    if (opened == nullptr) {
      *peer = nullptr;
      return Status::Ok();
    }
    slot.reset(opened);
    if (local_rank_ == 0) {
      slot->Unlink();  // the leader is a member segment's only reader
    } else if (slot->header()->attached.fetch_add(1, std::memory_order_acq_rel) + 2 >=
               ranks_.size()) {
      slot->Unlink();  // the last member to map the leader's segment: no one else needs it
    }
  }
  // Possibly still of an earlier call's shape: the callers tell a peer that has not got
  // to this call yet from one that disagrees (Fits, ShapeMismatch).
  *peer = slot.get();
  return Status::Ok();
}

namespace {

// Gone, or a zombie its parent has not reaped yet (kill(pid, 0) still succeeds on those).
bool ProcessGone(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char buffer[512];
  const size_t n = std::fread(buffer, 1, sizeof(buffer) - 1, f);
  std::fclose(f);
  buffer[n] = '\0';
  const char* paren = std::strrchr(buffer, ')');  // "pid (comm) S ...": comm may hold spaces
  return paren != nullptr && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

}  // namespace

Status ShmLocalReduce::PeerAlive(const ShmSegment& peer, int local_rank,
                                 const LocalTensor& t) const {
  if (!check_liveness_) return Status::Ok();
  const pid_t pid = peer.header()->pid;
  if (!ProcessGone(pid)) return Status::Ok();
  return Unavailable(Describe(local_rank) + " (pid " + std::to_string(pid) +
                     ") exited during call " + std::to_string(t.step) + " of '" + t.name +
                     "' (hierarchical aggregation): the local step cannot complete");
}

std::optional<Status> ShmLocalReduce::LeaderReduceOnPoll(const LocalTensor& t, const void* input,
                                                         void** sum) {
  // Every member has the previous answer: it lives where this step's sum (or error) goes,
  // and a new shape replaces the segment. A member without a segment waits for none.
  std::vector<ShmSegment*> members(ranks_.size(), nullptr);
  // A member that has joined (join()) adds nothing and is not waited for; its segment of
  // this name may not even exist. The push then does not list it: the servers count it
  // through their own join bookkeeping.
  std::vector<bool> joined(ranks_.size(), false);
  uint32_t joined_mask = 0;
  for (int lr = 1; lr < local_size(); ++lr) {
    joined[lr] = JoinedOnPoll(lr);
    if (joined[lr]) joined_mask |= 1u << lr;
  }
  if (t.joined) *t.joined = joined_mask;
  if (t.serving && joined_mask + 2 == (2u << (local_size() - 1))) {
    // Asked for by a member that has joined since (after its call failed): nothing to
    // push. Withdrawn, not answered, so the members' steps after the join (taken up from
    // the leader's last answer) stay in step with the leader's.
    WithdrawLeaderStepOnPoll(t.key, t.step + segments_[t.key].skipped);  // the caller's number
    return Aborted("every local worker has joined: no step to run for them");
  }
  for (int lr = 1; lr < local_size(); ++lr) {
    if (joined[lr]) continue;
    TFPS_RETURN_IF_ERROR(PeerOnPoll(t, lr, &members[lr]));
    if (members[lr] != nullptr &&
        members[lr]->header()->ack_step.load(std::memory_order_acquire) + 1 < t.step) {
      TFPS_RETURN_IF_ERROR(PeerAlive(*members[lr], lr, t));
      return std::nullopt;
    }
  }
  ShmSegment* own = nullptr;
  TFPS_RETURN_IF_ERROR(OwnOnPoll(t, &own));
  if (t.abort) return AbortStatus(local_rank_, t.reason);  // answered without the inputs
  std::optional<Status> handed = MembersHandedOnPoll(t, joined, members);
  if (!handed || !handed->ok()) return handed;
  if (!TakeInputsOnPoll(t, joined, members)) return std::nullopt;
  return SumInputsOnPoll(t, joined, members, own, input, sum);
}

std::optional<Status> ShmLocalReduce::MembersHandedOnPoll(
    const LocalTensor& t, const std::vector<bool>& joined,
    const std::vector<ShmSegment*>& members) const {
  bool all_ready = true;
  for (int lr = 1; lr < local_size(); ++lr) {
    if (joined[lr]) continue;
    const ShmHeader* h = members[lr] != nullptr ? members[lr]->header() : nullptr;
    // Its input (or abort) of this step is in place.
    const bool handed = h != nullptr && h->ready_step.load(std::memory_order_acquire) == t.step;
    if (handed) {
      TFPS_RETURN_IF_ERROR(CheckHandedOnPoll(t, lr, *members[lr]));
    } else {
      if (h != nullptr) TFPS_RETURN_IF_ERROR(PeerAlive(*members[lr], lr, t));
      all_ready = false;
    }
  }
  if (!all_ready) return std::nullopt;
  return Status::Ok();
}

Status ShmLocalReduce::CheckHandedOnPoll(const LocalTensor& t, int lr,
                                         const ShmSegment& member) const {
  const ShmHeader* h = member.header();
  if (h->aborted_step.load(std::memory_order_acquire) == t.step) {
    char text[sizeof(h->error)];
    std::memcpy(text, h->error, sizeof(text));
    text[sizeof(text) - 1] = '\0';
    return AbortStatus(lr, text);
  }
  if (!Fits(member, t)) {
    Status mismatch = ShapeMismatch(member, lr, t);
    if (!t.serving) return mismatch;
    return FailedPrecondition("the local leader, " + Describe(0) + ", has joined (join()) "
                              "and adds zeros of its own last call of '" + t.name +
                              "' for the workers still training: " + mismatch.message());
  }
  if (t.shape_digest != 0 &&
      h->shape_digest.load(std::memory_order_relaxed) != t.shape_digest) {
    return FailedPrecondition(Describe(lr) + ", tensor '" + t.name + "' (call " +
                              std::to_string(t.step) + "): the same number of elements as "
                              "this worker's but another shape: do the local workers "
                              "disagree on the tensor's shape?");
  }
  return Status::Ok();
}

// Takes every member's input, or none: a member whose own wait timed out meanwhile has
// withdrawn it.
bool ShmLocalReduce::TakeInputsOnPoll(const LocalTensor& t, const std::vector<bool>& joined,
                                      const std::vector<ShmSegment*>& members) {
  for (int lr = 1; lr < local_size(); ++lr) {
    if (joined[lr]) continue;
    uint64_t expected = t.step;
    if (!members[lr]->header()->ready_step.compare_exchange_strong(expected, t.step | kTaken,
                                                                   std::memory_order_acq_rel)) {
      // Given back: a member that timed out meanwhile has waited for this (pending).
      for (int back = 1; back < lr; ++back) {
        if (joined[back]) continue;
        members[back]->header()->ready_step.store(t.step, std::memory_order_release);
      }
      return false;
    }
    if (lr == 1 && local_size() > 2) {
      const int64_t pause = take_pause_us.exchange(0, std::memory_order_relaxed);
      if (pause > 0) std::this_thread::sleep_for(std::chrono::microseconds(pause));
    }
  }
  return true;
}

Status ShmLocalReduce::SumInputsOnPoll(const LocalTensor& t, const std::vector<bool>& joined,
                                       const std::vector<ShmSegment*>& members,
                                       ShmSegment* own, const void* input, void** sum) {
  if (own->header()->attached.load(std::memory_order_acquire) + 1 >= ranks_.size()) {
    own->Unlink();  // every member has it mapped
  }
  const uint64_t bytes = t.count * DTypeSize(t.dtype);
  std::memcpy(own->data(), input, bytes);
  for (int lr = 1; lr < local_size(); ++lr) {
    if (joined[lr]) continue;
    if (!LocalSumInto(t.dtype, own->data(), members[lr]->data(), t.count)) {
      return InvalidArgument(std::string("hierarchical aggregation cannot sum ") +
                             DTypeName(t.dtype));
    }
  }
  // The inputs are read: members may overwrite them (one that timed out meanwhile does).
  for (int lr = 1; lr < local_size(); ++lr) {
    if (joined[lr]) continue;
    members[lr]->header()->ready_step.store(t.step | kCommitted, std::memory_order_release);
  }
  *sum = own->data();
  return Status::Ok();
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
      // A local peer whose process is gone failed the step already (step()): one that
      // is still missing is alive, and slow.
      const bool timed_out = !result && StallShutdownDue(stall_, it->since, now);
      if (timed_out || (!result && StallWarningDue(stall_, it->since, now,
                                                   &it->stall_warnings))) {
        const std::string waited_for =
            local_rank_ != 0 ? Describe(0) : NotHandedOnPoll(it->key);
        const std::string what =
            (it->what.empty() ? std::string("a local step") : it->what) + " on " +
            Describe(local_rank_) + " of " + std::to_string(local_size()) +
            " (hierarchical aggregation), waiting for " +
            (local_rank_ == 0 ? waited_for + " to hand over its tensor"
                              : "the local leader, " + Describe(0) + ", to answer");
        if (timed_out) {
          result = DeadlineExceeded("stalled for " + WholeSeconds(stall_.shutdown_s) +
                                    " s (TFPS_STALL_SHUTDOWN): " + what + "; " + waited_for +
                                    " is alive: is it stuck or running other code? Raise "
                                    "TFPS_STALL_SHUTDOWN, or set it to 0 to wait");
        } else {
          metrics::stalls.Add();
          TFPS_LOG(Warning) << "stall warning: " << what << ", has waited "
                            << WholeSeconds(SecondsSince(it->since, now)) << " s; "
                            << waited_for << " is alive (slow, not dead): the job waits on "
                            << "(TFPS_STALL_SHUTDOWN ends it)";
        }
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

std::vector<int> ShmLocalReduce::HandedOnPoll(uint64_t key, uint64_t* step) const {
  std::vector<int> handed;
  auto found = segments_.find(key);
  if (found == segments_.end()) return handed;
  const Segments& segs = found->second;
  for (int lr = 1; lr < static_cast<int>(segs.peers.size()); ++lr) {
    if (!segs.peers[lr]) continue;
    const uint64_t ready = segs.peers[lr]->header()->ready_step.load(std::memory_order_acquire);
    if (ready == 0 || (ready & (kTaken | kCommitted)) != 0) continue;  // none, or taken
    handed.push_back(lr);
    *step = std::max(*step, ready);
  }
  return handed;
}

std::string ShmLocalReduce::DescribeAll(const std::vector<int>& local_ranks) const {
  std::string all;
  for (int lr : local_ranks) all += (all.empty() ? "" : ", ") + Describe(lr);
  return all;
}

std::string ShmLocalReduce::NotHandedOnPoll(std::optional<uint64_t> key) const {
  if (!key) return "a local worker";
  uint64_t step = 0;
  const std::vector<int> handed = HandedOnPoll(*key, &step);
  std::vector<int> missing;
  for (int lr = 1; lr < local_size(); ++lr) {
    if (std::find(handed.begin(), handed.end(), lr) == handed.end()) missing.push_back(lr);
  }
  return missing.empty() ? "a local worker" : DescribeAll(missing);
}

void ShmLocalReduce::WarnLeaderBehindOnPoll(const std::list<Task>& tasks, Clock::time_point now) {
  std::vector<uint64_t> busy;  // names this worker is summing: its own warnings cover them
  for (const Task& task : tasks) {
    if (task.key) busy.push_back(*task.key);
  }
  for (auto& [key, segs] : segments_) {
    uint64_t step = 0;
    const std::vector<int> handed = std::find(busy.begin(), busy.end(), key) == busy.end()
                                        ? HandedOnPoll(key, &step)
                                        : std::vector<int>();
    if (handed.empty() || step != segs.idle_step) {
      segs.idle_step = handed.empty() ? 0 : step;
      segs.idle_since = now;
      segs.idle_warnings = 0;
      continue;
    }
    if (!StallWarningDue(stall_, segs.idle_since, now, &segs.idle_warnings)) continue;
    metrics::stalls.Add();
    TFPS_LOG(Warning) << "stall warning: tensor '" << segs.name << "' (step "
                      << step << ") on " << Describe(0) << " of " << local_size()
                      << " (hierarchical aggregation): " << DescribeAll(handed)
                      << (handed.size() == 1 ? " has" : " have") << " handed it over and "
                      << "waited " << WholeSeconds(SecondsSince(segs.idle_since, now))
                      << " s for this worker, the local leader, which has not called it "
                      << "yet: this worker is the slow one (running other code?); the job "
                      << "waits on (TFPS_STALL_SHUTDOWN ends it)";
  }
}

void ShmLocalReduce::UnlinkAllOnPoll() {
  // Ours, and every peer's we could know of: a local worker that crashed left its own.
  for (auto& kv : segments_) {
    if (kv.second.own) kv.second.own->Unlink();
    for (int lr = 0; lr < local_size(); ++lr) {
      if (lr != local_rank_) UnlinkShm(SegmentName(kv.first, lr));
    }
  }
  segments_.clear();
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

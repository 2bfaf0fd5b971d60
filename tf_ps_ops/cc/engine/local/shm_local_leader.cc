// The leader's side of ShmLocalReduce's step (shm_local_reduce.h): waiting for the members'
// inputs, checking them, taking them all or none, and summing them into its own segment.
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tf_ps_ops/cc/engine/local/shm_local_reduce.h"

namespace tfps {

namespace {
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

}  // namespace tfps

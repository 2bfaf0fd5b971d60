// hvd.join() under hierarchical aggregation, the shared-memory side (docs/hierarchical.md,
// "join()"): ShmLocalReduce's join methods and their poll-thread helpers.
//
// Each local worker that joins has a small control segment under a reserved key
// (JoinControl(): named, sealed, mapped and unlinked like a tensor's), whose `ready_step`
// counts the joins it began. Every local worker counts the joins it completed; a peer is
// joined while its count of joins begun is above that. (Every worker calls join() once per
// epoch, so the counts agree when a join completes.) The leader counts a joined member as
// zeros; a joined leader keeps running the steps its members still hand over (`serve_`);
// and a member's first call of a name after a join takes up the leader's step count of it.
#include <future>

#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/engine/local/shm_local_reduce.h"

namespace tfps {

const LocalTensor& ShmLocalReduce::JoinControl() {
  static const LocalTensor* control = [] {
    auto* t = new LocalTensor;
    t->name = "join() control";
    t->key = KeyOfName("tfps.join control");
    t->dtype = DType::kInt64;
    t->count = 1;
    return t;
  }();
  return *control;
}

Status ShmLocalReduce::BeginJoin(Serve serve, bool* members_joined) {
  auto finished = std::make_shared<std::promise<Status>>();
  std::future<Status> status = finished->get_future();
  auto all_joined = std::make_shared<bool>(true);
  Add([this, serve, all_joined]() -> std::optional<Status> {
        ShmSegment* own = nullptr;
        TFPS_RETURN_IF_ERROR(OwnOnPoll(JoinControl(), &own));
        ++joins_begun_;
        own->header()->ready_step.store(joins_begun_, std::memory_order_release);
        if (local_rank_ != 0) return Status::Ok();
        for (int lr = 1; lr < local_size(); ++lr) {
          if (!JoinedOnPoll(lr, /*now=*/true)) *all_joined = false;
        }
        members_joined_.store(*all_joined, std::memory_order_release);
        if (!*all_joined) serve_ = serve;
        return Status::Ok();
      },
      [finished](const Status& s) { finished->set_value(s); });
  Status s = status.get();  // one poll round: the task never waits
  *members_joined = *all_joined;
  return s.ok() ? s : s.WithPrefix("join() on " + Describe(local_rank_) + ": ");
}

void ShmLocalReduce::EndJoin() {
  auto finished = std::make_shared<std::promise<void>>();
  std::future<void> done = finished->get_future();
  Add([this]() -> std::optional<Status> {
        ++joins_completed_;
        serve_ = nullptr;
        members_joined_.store(false, std::memory_order_release);
        return Status::Ok();
      },
      // Stopped or failed instead: nothing runs any more, so nothing is served either.
      [finished](const Status&) { finished->set_value(); });
  done.wait();
}

uint64_t ShmLocalReduce::JoinsBegunOnPoll(int local_rank, bool now) {
  if (local_rank == local_rank_) return joins_begun_;
  Segments& segs = segments_[JoinControl().key];
  segs.peers.resize(ranks_.size());
  if (!segs.peers[local_rank]) {
    // Not there until that worker first joins: look again every 50 ms, not at every
    // step of every name.
    control_tried_.resize(ranks_.size());
    const Clock::time_point time = Clock::now();
    if (!now && time - control_tried_[local_rank] < std::chrono::milliseconds(50)) return 0;
    control_tried_[local_rank] = time;
    ShmSegment* peer = nullptr;
    Status s = PeerOnPoll(JoinControl(), local_rank, &peer);
    if (!s.ok()) {
      TFPS_LOG(Warning) << "join(): " << s.message();
      return 0;
    }
    if (peer == nullptr) return 0;
  }
  return segs.peers[local_rank]->header()->ready_step.load(std::memory_order_acquire);
}

void ShmLocalReduce::AlignAfterJoinOnPoll(const LocalTensor& t) {
  Segments& segs = segments_[t.key];
  if (local_rank_ == 0 || segs.aligned_joins >= joins_completed_) return;
  segs.aligned_joins = joins_completed_;
  // Every local worker was idle when the join returned, so the leader's last answer of
  // the name is where the host's steps of it stand: this worker's next call is the next.
  ShmSegment* leader = nullptr;
  if (!PeerOnPoll(t, 0, &leader).ok() || leader == nullptr) return;
  const uint64_t last = leader->header()->result_step.load(std::memory_order_acquire);
  const uint64_t step = MappedOnPoll(t).step;
  if (last >= step) segs.skipped -= last + 1 - step;  // wraps; MappedOnPoll subtracts it
}

Status ShmLocalReduce::LeaderCanServeOnPoll(const LocalTensor& t, bool now) {
  if (local_rank_ == 0 || !JoinedOnPoll(0, now)) return Status::Ok();
  ShmSegment* leader = nullptr;
  TFPS_RETURN_IF_ERROR(PeerOnPoll(t, 0, &leader));
  if (leader != nullptr) return Status::Ok();
  return FailedPrecondition(
      "the local leader, " + Describe(0) + ", has joined (join()) and never called '" +
      t.name + "', so it cannot push this name's local sum for " + Describe(local_rank_) +
      " (hierarchical aggregation): a joined leader serves only names it called before; "
      "set TFPS_HIERARCHICAL=0 for jobs whose workers call different names");
}

void ShmLocalReduce::ServeJoinedOnPoll() {
  std::vector<bool> joined(ranks_.size(), false);
  bool all = true;
  for (int lr = 1; lr < local_size(); ++lr) {
    joined[lr] = JoinedOnPoll(lr);
    all = all && joined[lr];
  }
  if (all) {  // nothing to serve any more: the caller releases the leader's join
    members_joined_.store(true, std::memory_order_release);
    return;
  }
  const uint64_t control = JoinControl().key;
  for (auto& kv : segments_) {
    Segments& segs = kv.second;
    if (kv.first == control || !segs.own) continue;
    // The leader's next step of this name (withdrawn steps are numbered again).
    const uint64_t next = segs.own->header()->result_step.load(std::memory_order_acquire) + 1;
    if (segs.served_step == next) continue;  // asked for already, or running
    segs.peers.resize(ranks_.size());
    for (int lr = 1; lr < local_size(); ++lr) {
      if (joined[lr]) continue;
      // Not there yet (opened every 50 ms), or replaced for another shape (re-opened).
      if (!segs.peers[lr] && !check_liveness_) continue;
      LocalTensor t;
      t.name = segs.name;
      t.key = kv.first;
      ShmSegment* peer = nullptr;
      if (!PeerOnPoll(t, lr, &peer).ok() || peer == nullptr) continue;
      if (segs.peers[lr]->header()->ready_step.load(std::memory_order_acquire) == next) {
        // `joined` may be stale (a peer's control segment is looked for every 50 ms): this
        // member may have joined since, and the join completed on the servers without this
        // leader's release (every rank was in their join order), so that this input is its
        // first call after the join, which this leader's own next call must take, with
        // its own data, not zeros. A member writes its control segment before its kJoin
        // leaves, so read after its input, the count is current (CI saw the race: a sum
        // without the leader's data on a loaded machine).
        if (JoinedOnPoll(lr, /*now=*/true)) continue;
        segs.served_step = next;
        serve_(kv.first);
        break;
      }
    }
  }
}

}  // namespace tfps

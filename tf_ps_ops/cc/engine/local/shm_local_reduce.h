// LocalReduce over POSIX shared memory, for the workers of one host (CPU).
//
// Each local worker has one segment per tensor name, created on its first call of that
// name with mode 0600 and O_EXCL, named /tfps-<token>-<key>-<local rank>: the token is 128
// random bits the leader drew and shared through the rendezvous (unguessable, one per
// job). A segment is a header (shm_segment.h) and the tensor's bytes:
//   member: its input of step s, then `ready_step` = s; `ack_step` = s once it has copied
//           the answer of step s;
//   leader: the local sum (the leader's input, then each member's added in local-rank
//           order), which it pushes to the servers and into which the answer comes back;
//           `result_step` = s when the answer (or the error, `result_code`/`error`) is there.
// The leader overwrites its sum for step s only when every member acknowledged s-1; a
// member overwrites its input only after it got the answer of s-1 (the caller orders a
// name's steps). The leader takes the members' inputs of s all at once, setting kTaken in
// their `ready_step` (and kCommitted once summed; it gives them back if one was withdrawn
// meanwhile); a wait that times out with nothing taken withdraws the step (a member:
// `ready_step` = 0) and its number is used again (Segments::skipped), so workers that went
// out of step pair up again. A member that times out while its input is kTaken leaves
// the step pending until the leader decides (Segments::pending). Segments are unlinked as soon as everyone who needs them has them mapped
// (members' by the leader, the leader's by its last member), so a crash later leaks
// nothing; whatever is still linked at shutdown (or at a crash's next shutdown of another
// local worker) is unlinked by every local worker that knows its name.
//
// hvd.join() (shm_local_join.cc): a local worker that joined says so in a control segment
// of its own; the leader counts a joined member as zeros, a joined leader keeps running the
// steps its members hand over, and a member re-aligns its steps of a name after a join.
//
// The code is in four files by job: shm_local_reduce.cc (the calls, their poll thread, a
// member's side of a step), shm_local_leader.cc (the leader's side: taking and summing the
// members' inputs), shm_local_segments.cc (mapping and checking segments) and
// shm_local_stall.cc (stall warnings and the stall timeout's error).
//
// One thread owns every segment and polls the pending calls (a spin, then sleeps of up to
// 500 us): no futex on memory that a hostile or dead peer shares. A peer whose process is
// gone (its pid in the header) fails the call at once, naming the local rank; one that is
// alive but slow gets stall warnings every TFPS_STALL_WARNING and fails the call only
// after TFPS_STALL_SHUTDOWN, if set (cc/common/stall.h).
#ifndef TFPS_CC_ENGINE_LOCAL_SHM_LOCAL_REDUCE_H_
#define TFPS_CC_ENGINE_LOCAL_SHM_LOCAL_REDUCE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tf_ps_ops/cc/common/stall.h"
#include "tf_ps_ops/cc/engine/local/local_reduce.h"
#include "tf_ps_ops/cc/transport/shm_segment.h"

namespace tfps {

class ShmLocalReduce : public LocalReduce {
 public:
  // `ranks`: the global rank of each local rank (this host's workers, in rank order).
  ShmLocalReduce(std::string token, std::vector<int> ranks, int local_rank,
                 const StallPolicy& stall);
  ~ShmLocalReduce() override;

  int local_rank() const override { return local_rank_; }
  int local_size() const override { return static_cast<int>(ranks_.size()); }
  void ReduceToLeader(const LocalTensor& tensor, const void* input, ReduceDone done) override;
  void BroadcastFromLeader(const LocalTensor& tensor, const Status& result, void* output,
                           Done done) override;
  void Fail(const Status& why) override;
  void Shutdown() override;
  // hvd.join() (shm_local_join.cc).
  Status BeginJoin(Serve serve, bool* members_joined) override;
  bool MembersJoined() override { return members_joined_.load(std::memory_order_acquire); }
  void EndJoin() override;

  // A fresh token: 128 bits from the kernel's random source, as 32 hex digits.
  static Status NewToken(std::string* token);
  // Tests only: the leader's next take of three or more local workers' inputs sleeps this
  // long after taking local rank 1's (the window in which members may time out).
  static void SetTakePauseForTesting(double seconds);

 private:
  using Clock = std::chrono::steady_clock;
  // One pending call: Step() returns nullopt until it is finished (on the poll thread).
  struct Task {
    std::function<std::optional<Status>()> step;
    std::function<void(const Status&)> finish;
    Clock::time_point since;   // stall warnings; fails after TFPS_STALL_SHUTDOWN (if set)
    std::function<void()> on_timeout;  // may be null; runs on the poll thread before finish
    std::string what;          // "tensor 'x' (step 3)", for warnings and errors
    int stall_warnings = 0;
    std::optional<uint64_t> key;  // leader's reduce: the name it sums (stall warnings)
  };
  struct Segments {  // one tensor name's: own, and by local rank the peers' this one reads
    std::unique_ptr<ShmSegment> own;
    std::vector<std::unique_ptr<ShmSegment>> peers;
    // Out-of-step recovery: a step no other local worker took part in (it timed out while
    // this worker's input was unclaimed) is withdrawn and its number used again, so the
    // local workers' step numbers of a name stay aligned. `skipped` is how many were.
    uint64_t skipped = 0;
    uint64_t withdrawn_step = 0;  // leader: the caller's step whose reduce it withdrew
    uint64_t pending = 0;  // member: a step that timed out while the leader was taking it
    // hvd.join() (shm_local_join.cc). Member: the joins completed when this name's steps
    // were last aligned with the leader's. Leader: the step it last asked the caller to
    // serve for its members (0: none), and the name, for errors.
    uint64_t aligned_joins = 0;
    uint64_t served_step = 0;
    std::string name;
    // Leader, stall warnings: a step some members handed over while this worker has not
    // called the name (it is the slow one), since when, and the warnings logged for it.
    uint64_t idle_step = 0;
    Clock::time_point idle_since;
    int idle_warnings = 0;
  };

  // Set in a member's `ready_step` by the leader: kTaken while it takes the members' inputs
  // of that step (all or none: it may still give a member's back, restoring the step), then
  // kCommitted once it summed them. A member can withdraw only an untaken input; one whose
  // wait times out while its input is kTaken leaves the step undecided (Segments::pending)
  // and its next call of the name waits for the leader's decision before it writes again.
  static constexpr uint64_t kTaken = uint64_t{1} << 63;
  static constexpr uint64_t kCommitted = uint64_t{1} << 62;

  void Add(std::function<std::optional<Status>()> step, std::function<void(const Status&)> finish,
           std::function<void()> on_timeout = nullptr, const std::string& what = "",
           std::optional<uint64_t> key = std::nullopt);
  // Poll thread, a call still waiting at `now` (shm_local_stall.cc): logs a stall warning
  // when one is due (TFPS_STALL_WARNING) and returns nullopt, or returns the error that ends
  // the call after TFPS_STALL_SHUTDOWN.
  std::optional<Status> StalledOnPoll(Task& task, Clock::time_point now);
  // Leader, poll thread: the local ranks whose input of `key`'s current step is handed
  // over and not yet taken.
  std::vector<int> HandedOnPoll(uint64_t key, uint64_t* step) const;
  // Leader, poll thread: who a reduce of `key` waits for, for its stall warnings: the local
  // ranks that have not handed over ("a local worker" when that is not known).
  std::string NotHandedOnPoll(std::optional<uint64_t> key) const;
  std::string DescribeAll(const std::vector<int>& local_ranks) const;  // Describe, joined
  // Leader, poll thread: a stall warning for each name whose members handed over a step
  // this worker has not called yet (TFPS_STALL_WARNING): the slow rank is this one.
  void WarnLeaderBehindOnPoll(const std::list<Task>& tasks, Clock::time_point now);
  // Leader: the caller's step `caller_step` of `key` is withdrawn, not answered (a wait that
  // timed out, or a step to serve when every member has joined): its number is used again.
  void WithdrawLeaderStepOnPoll(uint64_t key, uint64_t caller_step);
  // The caller's step of `t` as the segments number it (after withdrawn ones).
  LocalTensor MappedOnPoll(const LocalTensor& t);
  // Member: settles a `pending` step of `key` (done, or withdrawn); false while the leader
  // still holds the input taken.
  bool ResolvePendingOnPoll(uint64_t key);
  void RunPolling();
  std::string Describe(int local_rank) const;
  std::string SegmentName(uint64_t key, int local_rank) const;
  // ...OnPoll: the poll thread's state (segments_).
  Status OwnOnPoll(const LocalTensor& t, ShmSegment** own);
  // The peer's segment mapped, or nullptr while it does not exist yet.
  Status PeerOnPoll(const LocalTensor& t, int local_rank, ShmSegment** peer);
  std::optional<Status> LeaderReduceOnPoll(const LocalTensor& t, const void* input, void** sum);
  // The leader's steps of LeaderReduceOnPoll, over the members still training (not
  // `joined`): whether each has handed its input of the step (Ok: all; nullopt: not yet);
  // one input's check; taking them all or none (false: given back, try again); summing
  // them into `own`.
  std::optional<Status> MembersHandedOnPoll(const LocalTensor& t, const std::vector<bool>& joined,
                                            const std::vector<ShmSegment*>& members) const;
  Status CheckHandedOnPoll(const LocalTensor& t, int local_rank, const ShmSegment& member) const;
  bool TakeInputsOnPoll(const LocalTensor& t, const std::vector<bool>& joined,
                        const std::vector<ShmSegment*>& members);
  Status SumInputsOnPoll(const LocalTensor& t, const std::vector<bool>& joined,
                         const std::vector<ShmSegment*>& members, ShmSegment* own,
                         const void* input, void** sum);
  std::optional<Status> MemberReceiveOnPoll(const LocalTensor& t, void* output);
  Status PeerAlive(const ShmSegment& peer, int local_rank, const LocalTensor& t) const;
  // Whether a segment is of `t`'s size and dtype; the error naming a peer's that is not.
  static bool Fits(const ShmSegment& segment, const LocalTensor& t);
  Status ShapeMismatch(const ShmSegment& peer, int local_rank, const LocalTensor& t) const;
  // The step's error when `local_rank` aborted it (PsAbortCollective) for `reason`.
  Status AbortStatus(int local_rank, const std::string& reason) const;
  void UnlinkAllOnPoll();

  // hvd.join() (shm_local_join.cc), on the poll thread. Each local worker that joined has
  // a control segment (kJoinControlKey) whose `ready_step` counts the joins it began; a
  // local worker is joined while that count is above the joins this one completed.
  static const LocalTensor& JoinControl();
  // The joins `local_rank` began (0 while it has no control segment); opening a peer's
  // segment is tried only on liveness rounds (every 50 ms) unless `now`.
  uint64_t JoinsBegunOnPoll(int local_rank, bool now = false);
  bool JoinedOnPoll(int local_rank, bool now = false) {
    return JoinsBegunOnPoll(local_rank, now) > joins_completed_;
  }
  // Member, before handing over a step of `t`'s name: after a completed join, takes up
  // the leader's step count of the name (the steps it was counted as zeros in).
  void AlignAfterJoinOnPoll(const LocalTensor& t);
  // Member: an error when the leader has joined and never called `t`'s name (it cannot
  // serve it); Ok otherwise.
  Status LeaderCanServeOnPoll(const LocalTensor& t, bool now);
  // Leader, joined: asks `serve_` for each name whose next step a member that still trains
  // has handed its input for; updates members_joined_.
  void ServeJoinedOnPoll();

  const std::string token_;
  const std::vector<int> ranks_;
  const int local_rank_;
  const StallPolicy stall_;

  std::mutex mu_;
  std::condition_variable wake_;
  std::list<Task> incoming_;  // guarded by mu_
  bool stopping_ = false;     // guarded by mu_
  Status failed_;             // guarded by mu_: set by Fail()
  std::thread thread_;
  std::map<uint64_t, Segments> segments_;  // poll thread only
  // hvd.join(), poll thread: joins this worker began and completed, and the leader's
  // serving callback while it is joined (null otherwise).
  uint64_t joins_begun_ = 0;
  uint64_t joins_completed_ = 0;
  Serve serve_;
  std::atomic<bool> members_joined_{false};
  std::vector<Clock::time_point> control_tried_;  // per local rank: last open attempt
  bool check_liveness_ = false;             // poll thread: look at peers' pids this round
  Clock::time_point last_behind_check_;      // leader: WarnLeaderBehindOnPoll, every 1 s
  Clock::time_point last_liveness_check_;   // (every 50 ms: it reads /proc)
};

}  // namespace tfps

#endif  // TFPS_CC_ENGINE_LOCAL_SHM_LOCAL_REDUCE_H_

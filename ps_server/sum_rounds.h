// Summation rounds: one per (key, partition, step), collecting one push from every worker.
// The first push with data becomes the accumulator (no copy) and later ones are summed
// into it; a sparse round keeps each worker's rows instead, for the parameter store to
// merge. Compressed pushes (Header::codec) are decoded on arrival and summed in float32;
// KeyStore re-encodes the sum. Rounds of different steps are independent, so a push for
// step t+1 that arrives while step t is still open corrupts nothing. A round that cannot
// complete (workers disagree, one is gone, TFPS_STALL_SHUTDOWN passed) fails every worker
// that pushed to it; one that waits on live workers only warns (cc/common/stall.h).
// Owned by one summation thread: no locks. The rounds themselves are in sum_rounds.cc,
// whether a push may join one in sum_rounds_checks.cc, hvd.join() in sum_rounds_join.cc.
#ifndef TFPS_PS_SERVER_SUM_ROUNDS_H_
#define TFPS_PS_SERVER_SUM_ROUNDS_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "ps_server/buffer.h"
#include "ps_server/outgoing.h"
#include "tf_ps_ops/cc/common/stall.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

using RoundId = std::tuple<uint64_t, uint32_t, uint64_t>;  // key, partition, step

struct Round {
  RoundId id;
  Header first;                // the first push's header: what every other must match
  std::vector<int64_t> dims;
  std::vector<double> params;  // the first push's hyperparameters and slot values (PS mode)
  int first_sender = -1;
  std::vector<bool> arrived;
  std::vector<bool> answered;       // failed already (an error reply went out), or summed
                                    // by a local leader, which answers it (hierarchical)
  std::vector<double> received_us;  // per worker, when its push has kFlagTimed
  int num_arrived = 0;
  int expected = 0;               // pushes that complete it: the workers, or its set's members
  std::vector<int32_t> members;   // its process set (kFlagProcessSet); empty: every worker
  bool joined_zeros = false;      // a joined worker (hvd.join()) counts as a push of zeros
  // Per worker: how far its own step count for this (key, partition) is behind the round's,
  // the rounds it was counted in while joined (empty: none). Its reply carries its own.
  std::vector<uint64_t> step_behind;
  Buffer sum;                // float32 when the pushes are compressed (decoded on arrival)
  bool has_data = false;
  uint64_t codec_k = 0;      // topk/randomk: elements each push kept (the first push's)
  std::vector<Buffer> rows;  // sparse: each worker's [ids][rows], by rank
  Status error;
  std::chrono::steady_clock::time_point started;
  int stall_warnings = 0;  // stall warnings given (one every TFPS_STALL_WARNING)
};

// "server 0, step 3, partition 1": where a round is, for error messages.
std::string Where(int server_id, const RoundId& id);

class SumRounds {
 public:
  using Clock = std::chrono::steady_clock;

  SumRounds(int num_workers, int server_id, const StallPolicy& stall);

  // Adds a push (`received_us`: when it arrived, for timed replies). Returns true with the
  // round moved to *complete when every worker has pushed and nothing failed it; the
  // caller answers it. Errors go to *out.
  bool Add(const Head& head, Buffer payload, double received_us, std::vector<Outgoing>* out,
           Round* complete);
  // The worker is gone: every open round that still needs it fails, and so will new ones.
  void OnWorkerLost(int rank, const std::string& why, std::vector<Outgoing>* out);
  // Rounds (and joins) that wait on workers: a stall warning every TFPS_STALL_WARNING to
  // *warnings (when given), naming the tensor keys and the ranks submitted and missing;
  // failed after TFPS_STALL_SHUTDOWN (if set). Lost workers failed them already.
  void OnTick(Clock::time_point now, std::vector<Outgoing>* out,
              std::vector<std::string>* warnings = nullptr);
  // hvd.join() (MsgType::kJoin) from `join`'s sender: until every worker has joined, it
  // counts as having pushed zeros to every round that needs it, open or new. Rounds this
  // completes go to *complete, for the caller to answer. Once every worker has joined,
  // `answer` (one summation thread per server) answers each join with the last rank to
  // join; every thread then forgets the joins.
  // Under hierarchical aggregation (docs/hierarchical.md, "join()"): a local leader whose
  // members still train joins with kFlagJoinLeads: it takes its place in the join order
  // and counts as zeros in flat rounds, but not in kFlagHierarchical rounds, which it still
  // pushes for its members, until its kFlagJoinRelease (answered at once by `answer`).
  void OnJoin(const Head& join, bool answer, std::vector<Outgoing>* out,
              std::vector<Round>* complete);
  // Answers every worker of `round` not yet answered with `status`.
  void Fail(Round& round, const Status& status, std::vector<Outgoing>* out) const;

  size_t open() const { return rounds_.size(); }

  // Each rank's host, from the cluster view: the ranks of a host share one local leader,
  // the lowest of them (docs/hierarchical.md), and a local sum (kFlagHierarchical) is
  // taken only from the leader, for ranks of its host. Unset: not checked (unit tests).
  void SetWorkerHosts(const std::vector<std::string>& hosts);

 private:
  Round& Open(const Head& head, const RoundId& id);
  // Add's steps. Why a push from outside the round's process set is refused; Ok if not.
  Status CheckSetMember(const Head& head, const RoundId& id) const;
  // Counts the push as arrived (with the ranks a local leader's push stands for); false,
  // with the error reply in *out, when it cannot be (pushed twice, a bad rank list).
  bool MarkArrived(Round& round, const Head& pushed, const Head& head, double received_us,
                   std::vector<Outgoing>* out);
  // Fails the round on an aborted push or a mismatch (answering it), else adds the payload
  // to it: decoded, kept as sparse rows, or reduced into the sum.
  void Accumulate(Round& round, const Head& head, Buffer* payload, std::vector<Outgoing>* out);
  // A dense push's data: the round's first becomes the sum, later ones reduce into it.
  void ReduceDense(Round& round, const Header& h, Buffer* payload);
  // Why this push cannot join the round (a disagreement with its first push); Ok if it can.
  Status Mismatch(const Round& round, const Head& head) const;
  // The collective's own fields: reduce op, broadcast or not, and the broadcast's root.
  Status CollectiveMismatch(const Round& round, const Head& head) const;
  // A joined worker counts as arrived, with zeros, and gets no reply.
  void MarkJoined(Round& round, int rank);
  // A worker counted in rounds while joined pushes with its own, lower, step count: the
  // push as the round sees it (its step moved up), noting the difference in the round.
  const Head& InRoundSteps(const Head& head, Head* shifted) const;
  // Min/max/product rounds: a joined worker's zeros take part (Horovod's join semantics).
  void ReduceJoinedZeros(Round& round);
  // kFlagJoinRelease: the leading joiner counts as joined in hierarchical rounds too.
  void OnJoinRelease(const Head& release, bool answer, std::vector<Outgoing>* out,
                     std::vector<Round>* complete);
  // Whether a joined `rank` counts as zeros in `round` (a leading joiner: not in a
  // hierarchical round).
  bool CountsJoined(const Round& round, int rank) const;
  // Marks `rank` joined in every open round it is due in (and CountsJoined); rounds that
  // completes go to *complete, failed ones are answered.
  void MarkJoinedInOpenRounds(int rank, std::vector<Outgoing>* out, std::vector<Round>* complete);
  // The answer to `worker`'s kJoin (or release) `join`: int32 `value`.
  Outgoing JoinAnswer(const Header& join, int worker, int32_t value) const;
  // The joins so far fail with `status` (a timeout, a worker gone) and are forgotten.
  void FailJoins(const Status& status, std::vector<Outgoing>* out);
  // Marks the ranks a local leader's push stands for (kFlagHierarchical) as arrived.
  Status AddCovered(Round& round, const Head& head);
  // A compressed push's payload, decoded to float32 in place of the encoded one: the
  // round's first push into fresh memory (it becomes the sum), later ones into scratch_,
  // or, for a codec that can (CodecDecodesAdding), added straight into the sum (*summed).
  Status DecodeInto(Round& round, const Header& h, Buffer* payload, bool* summed);

  const int num_workers_;
  const int server_id_;
  // OnTick's steps for hvd.join() and for the rounds.
  void OnJoinTick(Clock::time_point now, std::vector<Outgoing>* out,
                  std::vector<std::string>* warnings);
  // The ranks of `round`'s process set that pushed (or are counted), and those missing.
  void SubmittedAndMissing(const Round& round, std::vector<int>* submitted,
                           std::vector<int>* missing) const;

  const StallPolicy stall_;
  int join_stall_warnings_ = 0;
  std::vector<std::string> hosts_;  // by rank (SetWorkerHosts); empty: not checked
  std::vector<int> leader_of_;      // by rank: the lowest rank on its host
  std::map<RoundId, Round> rounds_;
  std::map<int, std::string> lost_;  // rank -> why
  // hvd.join(): who has joined, in order, the join pushes to answer, and since when.
  std::vector<int> join_order_;
  std::vector<Header> joins_;  // by rank: the kJoin each joined worker sent
  std::vector<int> leading_;       // joined with kFlagJoinLeads, not released yet
  std::vector<int> late_release_;  // were leading when the join completed: a release
                                   // still on its way is expected, and ignored
  bool join_answers_ = false;  // this thread answers the joins (see OnJoin)
  // (rank, key, partition) -> rounds that rank was counted in while joined, for good.
  std::map<std::tuple<int, uint64_t, uint32_t>, uint64_t> behind_;
  Clock::time_point join_started_;
  // A compressed summation round's float32 sum, from sums_: a buffer no round holds any
  // more, of `count` elements, else a new one while the pool holds less than
  // kMaxPooledSumBytes, else fresh memory.
  Buffer SumBuffer(uint64_t count);

  // Decoded pushes that are summed at once (not a round's first, of a codec without
  // DecodeAdd): reused, so that fresh memory does not cost page faults every round.
  std::vector<float> scratch_;
  // The sums of compressed rounds, reused across rounds for the same reason (a round's sum
  // is dropped once it is re-encoded). Bounded: memory a server keeps for the job's life.
  static constexpr size_t kMaxPooledSumBytes = size_t{128} << 20;
  std::vector<std::shared_ptr<std::vector<float>>> sums_;
};

}  // namespace tfps

#endif  // TFPS_PS_SERVER_SUM_ROUNDS_H_

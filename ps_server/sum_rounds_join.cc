// hvd.join() on a summation thread (sum_rounds.h, OnJoin): the join order, the joined
// workers counted as zeros in the open rounds and the later ones, a local leader's leading
// join and its release, the answers once every worker has joined, and the stall warnings
// and timeout of a join that waits on workers.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "ps_server/process_sets.h"
#include "ps_server/reduce.h"
#include "ps_server/sum_rounds.h"
#include "tf_ps_ops/cc/common/logging.h"

namespace tfps {

void SumRounds::OnJoinTick(Clock::time_point now, std::vector<Outgoing>* out,
                           std::vector<std::string>* warnings) {
  if (join_order_.empty()) return;
  std::vector<int> missing;
  for (int rank = 0; rank < num_workers_; ++rank) {
    if (std::find(join_order_.begin(), join_order_.end(), rank) == join_order_.end()) {
      missing.push_back(rank);
    }
  }
  const std::string what = "join() (server " + std::to_string(server_id_) + ")";
  std::vector<int> joined(join_order_.begin(), join_order_.end());
  std::sort(joined.begin(), joined.end());
  if (StallShutdownDue(stall_, join_started_, now)) {
    FailJoins(StallShutdownStatus(stall_, what, RankList(joined), RankList(missing)), out);
    return;
  }
  if (warnings && StallWarningDue(stall_, join_started_, now, &join_stall_warnings_)) {
    warnings->push_back(StallWarningText(what + ", which every worker calls once it runs out "
                                         "of data,", RankList(joined), RankList(missing),
                                         SecondsSince(join_started_, now)));
  }
}
const Head& SumRounds::InRoundSteps(const Head& head, Head* shifted) const {
  if (behind_.empty()) return head;
  const Header& h = head.header;
  auto it = behind_.find({h.sender, h.key, h.partition});
  if (it == behind_.end()) return head;
  *shifted = head;
  shifted->header.step += it->second;
  return *shifted;
}

void SumRounds::MarkJoined(Round& r, int rank) {
  ++behind_[{rank, std::get<0>(r.id), std::get<1>(r.id)}];
  r.arrived[rank] = true;
  r.answered[rank] = true;
  ++r.num_arrived;
  r.joined_zeros = true;
}

void SumRounds::ReduceJoinedZeros(Round& r) {
  const auto op = static_cast<ReduceOp>(r.first.reduce_op);
  if (!r.joined_zeros || !r.has_data || op == ReduceOp::kSum) return;  // a sum: nothing to add
  const auto dtype = static_cast<DType>(r.first.dtype);
  Buffer zeros = Buffer::Zeros(r.first.count * DTypeSize(dtype));
  ReduceInto(op, dtype, r.sum.data(), zeros.data(), r.first.count);
}

bool SumRounds::CountsJoined(const Round& r, int rank) const {
  return (r.first.flags & kFlagHierarchical) == 0 ||
         std::find(leading_.begin(), leading_.end(), rank) == leading_.end();
}

void SumRounds::MarkJoinedInOpenRounds(int rank, std::vector<Outgoing>* out,
                                       std::vector<Round>* complete) {
  for (auto it = rounds_.begin(); it != rounds_.end();) {
    Round& r = it->second;
    if (r.arrived[rank] || !InProcessSet(r.members, rank) || !CountsJoined(r, rank)) {
      ++it;
      continue;
    }
    MarkJoined(r, rank);
    if (r.num_arrived < r.expected) {
      ++it;
      continue;
    }
    if (r.error.ok()) {
      ReduceJoinedZeros(r);
      complete->push_back(std::move(r));
    } else {
      Fail(r, r.error, out);
    }
    it = rounds_.erase(it);
  }
}

void SumRounds::OnJoinRelease(const Head& release, bool answer, std::vector<Outgoing>* out,
                              std::vector<Round>* complete) {
  const int rank = release.header.sender;
  auto late = std::find(late_release_.begin(), late_release_.end(), rank);
  auto leading = std::find(leading_.begin(), leading_.end(), rank);
  Status status;
  if (leading != leading_.end()) {
    leading_.erase(leading);
    MarkJoinedInOpenRounds(rank, out, complete);
  } else if (late != late_release_.end()) {
    late_release_.erase(late);  // the join completed first: nothing left to count
  } else {
    status = FailedPrecondition("worker " + std::to_string(rank) + " released a leading "
                                "join() it did not make (kFlagJoinRelease without an earlier "
                                "kFlagJoinLeads; server " + std::to_string(server_id_) + ")");
    TFPS_LOG(Warning) << status.message();
  }
  if (!answer) return;
  if (!status.ok()) {
    out->push_back(ErrorReply(release.header, rank, server_id_, status));
    return;
  }
  out->push_back(JoinAnswer(release.header, rank, rank));
}

Outgoing SumRounds::JoinAnswer(const Header& join, int worker, int32_t value) const {
  Head reply = HeadAbout(join, MsgType::kPushPullReply, server_id_);
  reply.header.dtype = static_cast<uint8_t>(DType::kInt32);
  reply.header.count = 1;
  reply.header.total_count = join.total_count;
  Buffer payload = Buffer::Allocate(sizeof(value));
  std::memcpy(payload.data(), &value, sizeof(value));
  return Outgoing{WorkerIdentity(worker), EncodeHead(reply), payload};
}

void SumRounds::OnJoin(const Head& join, bool answer, std::vector<Outgoing>* out,
                       std::vector<Round>* complete) {
  if ((join.header.flags & kFlagJoinRelease) != 0) {
    OnJoinRelease(join, answer, out, complete);
    return;
  }
  const int rank = join.header.sender;
  join_answers_ = answer;
  if (std::find(join_order_.begin(), join_order_.end(), rank) != join_order_.end()) {
    if (answer) {
      out->push_back(ErrorReply(join.header, rank, server_id_,
                                FailedPrecondition("worker " + std::to_string(rank) +
                                                   " called join() twice before every "
                                                   "worker joined")));
    }
    return;
  }
  if (join_order_.empty()) {
    join_started_ = Clock::now();
    join_stall_warnings_ = 0;
  }
  join_order_.push_back(rank);
  joins_.resize(num_workers_);
  joins_[rank] = join.header;
  if ((join.header.flags & kFlagJoinLeads) != 0) leading_.push_back(rank);
  MarkJoinedInOpenRounds(rank, out, complete);
  if (static_cast<int>(join_order_.size()) < num_workers_) return;
  late_release_ = leading_;
  leading_.clear();
  if (answer) {
    const int32_t last = join_order_.back();
    for (int worker : join_order_) out->push_back(JoinAnswer(joins_[worker], worker, last));
  }
  join_order_.clear();
}

void SumRounds::FailJoins(const Status& status, std::vector<Outgoing>* out) {
  if (join_answers_) {
    for (int worker : join_order_) {
      out->push_back(ErrorReply(joins_[worker], worker, server_id_, status));
    }
  }
  TFPS_LOG(Warning) << status.message();
  join_order_.clear();
  late_release_ = leading_;
  leading_.clear();
}

}  // namespace tfps

// Whether a push may join its summation round (sum_rounds.h): a worker's push that
// disagrees with the round's first push (the update, the compression, the shape or dtype,
// the process set, the reduce op, broadcast or not and its root) is refused with an error
// that names both workers; a push from outside the round's process set too.
#include <string>

#include "ps_server/process_sets.h"
#include "ps_server/sum_rounds.h"
#include "tf_ps_ops/cc/codec/codec.h"

namespace tfps {

Status SumRounds::Mismatch(const Round& r, const Head& head) const {
  const Header& h = head.header;
  // kFlagTimed may differ: one worker's timeline is its own business.
  constexpr uint32_t kModeFlags =
      kFlagPsInit | kFlagPsApply | kFlagPsOverwrite | kFlagSparse | kFlagPsSlot;
  if ((h.flags & kModeFlags) != (r.first.flags & kModeFlags) || h.optimizer != r.first.optimizer) {
    return InvalidArgument("workers disagree on how to update this tensor: worker " +
                           std::to_string(r.first_sender) + " asked for " +
                           OptimizerName(static_cast<Optimizer>(r.first.optimizer)) +
                           ", worker " + std::to_string(h.sender) + " for " +
                           OptimizerName(static_cast<Optimizer>(h.optimizer)) + " (" +
                           Where(server_id_, r.id) + ")");
  }
  const bool sparse = (h.flags & kFlagSparse) != 0;  // row counts differ between workers
  if (h.codec != r.first.codec ||
      (h.flags & kFlagNoFeedback) != (r.first.flags & kFlagNoFeedback)) {
    return InvalidArgument("workers disagree on compression: worker " +
                           std::to_string(r.first_sender) + " sent " +
                           CodecIdName(static_cast<CodecId>(r.first.codec)) + ", worker " +
                           std::to_string(h.sender) + " " +
                           CodecIdName(static_cast<CodecId>(h.codec)) +
                           " (or error feedback on one, off on the other) (" +
                           Where(server_id_, r.id) + ")");
  }
  if (h.dtype != r.first.dtype || head.dims != r.dims || (!sparse && h.count != r.first.count) ||
      h.num_partitions != r.first.num_partitions) {
    // FailedPrecondition, as Horovod reports mismatched collectives (code written for it
    // catches that class).
    return FailedPrecondition(
        "shape or dtype differs between workers: worker " + std::to_string(r.first_sender) +
        " sent " + DescribeTensor(static_cast<DType>(r.first.dtype), r.dims) + ", worker " +
        std::to_string(h.sender) + " sent " +
        DescribeTensor(static_cast<DType>(h.dtype), head.dims) + " (" +
        Where(server_id_, r.id) + ")");
  }
  if (head.members != r.members) {
    return FailedPrecondition("workers disagree on the process set: worker " +
                              std::to_string(r.first_sender) + " pushed for " +
                              DescribeProcessSet(r.members) + ", worker " +
                              std::to_string(h.sender) + " for " +
                              DescribeProcessSet(head.members) + " (" + Where(server_id_, r.id) +
                              ")");
  }
  return CollectiveMismatch(r, head);
}

Status SumRounds::CollectiveMismatch(const Round& r, const Head& head) const {
  const Header& h = head.header;
  if (h.reduce_op != r.first.reduce_op) {
    return FailedPrecondition(
        "workers disagree on the reduce op: worker " + std::to_string(r.first_sender) +
        " asked for " + ReduceOpName(static_cast<ReduceOp>(r.first.reduce_op)) + ", worker " +
        std::to_string(h.sender) + " for " + ReduceOpName(static_cast<ReduceOp>(h.reduce_op)) +
        " (" + Where(server_id_, r.id) + ")");
  }
  const bool broadcast = (h.flags & kFlagBroadcast) != 0;
  if (broadcast != ((r.first.flags & kFlagBroadcast) != 0)) {
    return FailedPrecondition("worker " + std::to_string(h.sender) + (broadcast ? "" : " did not") +
                              " broadcast where worker " + std::to_string(r.first_sender) +
                              (broadcast ? " did not" : " did") +
                              ": every worker must call the same collective under one name (" +
                              Where(server_id_, r.id) + ")");
  }
  if (broadcast && head.params != r.params) {
    return FailedPrecondition("workers disagree on the broadcast's root rank: worker " +
                              std::to_string(r.first_sender) + " named root " +
                              std::to_string(static_cast<int64_t>(r.params[0])) + ", worker " +
                              std::to_string(h.sender) + " root " +
                              std::to_string(static_cast<int64_t>(head.params[0])) + " (" +
                              Where(server_id_, r.id) + ")");
  }
  return Status::Ok();
}
// A push from outside the round's set is refused alone: counted, it would complete the
// round in place of a member's push.
Status SumRounds::CheckSetMember(const Head& head, const RoundId& id) const {
  const Header& h = head.header;
  Status set = CheckProcessSetPush(head, num_workers_, Where(server_id_, id));
  const auto open = rounds_.find(id);
  if (set.ok() && open != rounds_.end() && !InProcessSet(open->second.members, h.sender)) {
    set = InvalidArgument("worker " + std::to_string(h.sender) + " pushed to a round of process set " +
                          DescribeProcessSet(open->second.members) +
                          ", which it is not a member of (" + Where(server_id_, id) + ")");
  }
  return set;
}

}  // namespace tfps

#include "ps_server/sum_rounds.h"

#include <algorithm>
#include <sstream>

#include "ps_server/reduce.h"
#include "tf_ps_ops/cc/codec/codec.h"
#include "tf_ps_ops/cc/common/logging.h"

namespace tfps {

std::string Where(int server_id, const RoundId& id) {
  return "server " + std::to_string(server_id) + ", step " + std::to_string(std::get<2>(id)) +
         ", partition " + std::to_string(std::get<1>(id));
}

SumRounds::SumRounds(int num_workers, int server_id, double timeout_s)
    : num_workers_(num_workers), server_id_(server_id), timeout_s_(timeout_s) {}

Round& SumRounds::Open(const Head& head, const RoundId& id) {
  auto it = rounds_.find(id);
  if (it != rounds_.end()) return it->second;
  Round& r = rounds_[id];
  r.id = id;
  r.first = head.header;
  r.dims = head.dims;
  r.params = head.params;
  r.first_sender = head.header.sender;
  r.arrived.assign(num_workers_, false);
  r.answered.assign(num_workers_, false);
  r.started = Clock::now();
  if (!lost_.empty()) {  // a step that needs a worker already gone cannot complete
    const auto& lost = *lost_.begin();
    r.error = Unavailable("worker " + std::to_string(lost.first) + " is gone (" + lost.second +
                          "); the step cannot complete (" + Where(server_id_, id) + ")");
  }
  return r;
}

Status SumRounds::Mismatch(const Round& r, const Head& head) const {
  const Header& h = head.header;
  // kFlagTimed may differ: one worker's timeline is its own business.
  constexpr uint32_t kModeFlags = kFlagPsInit | kFlagPsApply | kFlagPsOverwrite | kFlagSparse;
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

bool SumRounds::Add(const Head& head, Buffer payload, double received_us,
                    std::vector<Outgoing>* out, Round* complete) {
  const Header& h = head.header;
  const RoundId id{h.key, h.partition, h.step};
  Round& r = Open(head, id);
  if (r.arrived[h.sender]) {
    out->push_back(ErrorReply(h, h.sender, server_id_,
                              Internal("pushed twice for the same step (" +
                                       Where(server_id_, id) + ")")));
    return false;
  }
  if ((h.flags & kFlagHierarchical) != 0) {
    Status s = AddCovered(r, head);
    if (!s.ok()) {
      out->push_back(ErrorReply(h, h.sender, server_id_, s));
      return false;
    }
  }
  r.arrived[h.sender] = true;
  ++r.num_arrived;
  if ((h.flags & kFlagTimed) != 0) {
    r.received_us.resize(num_workers_, 0.0);
    r.received_us[h.sender] = received_us;
  }
  if (r.error.ok() && (h.flags & kFlagAbortRound) != 0) {
    r.error = FailedPrecondition(
        "worker " + std::to_string(h.sender) + " could not take part in this collective: " +
        EscapeForLog(std::string(static_cast<const char*>(payload.data()), payload.size()), 1024) +
        " (" + Where(server_id_, r.id) + "); the next collective can proceed");
  }
  if (r.error.ok()) r.error = Mismatch(r, head);
  if (r.error.ok() && h.codec != 0) r.error = DecodeInto(r, h, &payload);
  if (!r.error.ok()) {
    Fail(r, r.error, out);
  } else if ((h.flags & kFlagSparse) != 0) {
    r.rows.resize(num_workers_);
    r.rows[h.sender] = std::move(payload);  // merged at the end, in rank order
  } else if ((h.flags & kFlagNoData) == 0) {
    if (!r.has_data) {
      r.sum = std::move(payload);  // the first data push is the accumulator: no copy
      r.has_data = true;
    } else {
      ReduceInto(static_cast<ReduceOp>(h.reduce_op), static_cast<DType>(h.dtype), r.sum.data(),
                 payload.data(), h.count);
    }
  }
  if (r.num_arrived < num_workers_) return false;
  const bool ok = r.error.ok();
  if (ok) *complete = std::move(r);
  rounds_.erase(id);
  return ok;
}

// A local leader's push (kFlagHierarchical) sums the gradients of the ranks in its params,
// its own first: they count as arrived and are marked answered, since their leader hands
// them the sum. Nothing is marked unless every rank listed is valid and still due.
Status SumRounds::AddCovered(Round& r, const Head& head) {
  const Header& h = head.header;
  if (head.params.empty() || head.params[0] != h.sender) {
    return InvalidArgument("a hierarchical push must list its sender first (" +
                           Where(server_id_, r.id) + ")");
  }
  std::vector<int> ranks;
  for (size_t i = 1; i < head.params.size(); ++i) {
    const double v = head.params[i];
    const int rank = static_cast<int>(v);
    if (!(v >= 0 && v < num_workers_) || rank != v || r.arrived[rank] ||
        rank == h.sender || std::find(ranks.begin(), ranks.end(), rank) != ranks.end()) {
      std::ostringstream text;
      text << v;
      return InvalidArgument("worker " + std::to_string(h.sender) +
                             " pushed a local sum for rank " + text.str() +
                             ", which is not a worker still due (" + Where(server_id_, r.id) +
                             ")");
    }
    ranks.push_back(rank);
  }
  for (int rank : ranks) {
    r.arrived[rank] = true;
    r.answered[rank] = true;
    ++r.num_arrived;
  }
  return Status::Ok();
}

// Replaces a compressed payload by its float32 decoding, which joins the sum as an
// uncompressed push would. Every push of a topk/randomk round must keep as many elements
// as the first (the same ratio on every worker).
Status SumRounds::DecodeInto(Round& r, const Header& h, Buffer* payload) {
  const auto id = static_cast<CodecId>(h.codec);
  uint64_t k = 0;
  TFPS_RETURN_IF_ERROR(CheckEncoded(id, h.count, payload->size(), &k));
  if (r.num_arrived == 1) {
    r.codec_k = k;
  } else if (k != r.codec_k) {
    return InvalidArgument("workers disagree on the " + std::string(CodecIdName(id)) +
                           " ratio: worker " + std::to_string(r.first_sender) + " kept " +
                           std::to_string(r.codec_k) + " elements, worker " +
                           std::to_string(h.sender) + " " + std::to_string(k) + " (" +
                           Where(server_id_, r.id) + ")");
  }
  Buffer decoded;
  if (r.has_data) {  // summed into r.sum and dropped before the next push is decoded
    scratch_.resize(h.count);
    decoded = Buffer::Adopt(scratch_.data(), h.count * sizeof(float), nullptr);
  } else {
    decoded = Buffer::Allocate(h.count * sizeof(float));
  }
  TFPS_RETURN_IF_ERROR(Decode(id, reinterpret_cast<const uint8_t*>(payload->data()), h.count, k,
                              RandomKSeed(h.key, h.partition, h.step),
                              reinterpret_cast<float*>(decoded.data())));
  *payload = std::move(decoded);
  return Status::Ok();
}

void SumRounds::Fail(Round& round, const Status& status, std::vector<Outgoing>* out) const {
  for (int rank = 0; rank < num_workers_; ++rank) {
    if (!round.arrived[rank] || round.answered[rank]) continue;
    round.answered[rank] = true;
    out->push_back(ErrorReply(round.first, rank, server_id_, status));
  }
}

void SumRounds::OnWorkerLost(int rank, const std::string& why, std::vector<Outgoing>* out) {
  lost_[rank] = why;
  for (auto it = rounds_.begin(); it != rounds_.end();) {
    Round& r = it->second;
    if (r.arrived[rank]) {
      ++it;
      continue;
    }
    if (r.error.ok()) {
      r.error = Unavailable("worker " + std::to_string(rank) + " is gone (" + why +
                            ") before pushing; the step cannot complete (" +
                            Where(server_id_, it->first) + ")");
    }
    Fail(r, r.error, out);
    it = rounds_.erase(it);
  }
}

void SumRounds::OnTick(Clock::time_point now, std::vector<Outgoing>* out) {
  for (auto it = rounds_.begin(); it != rounds_.end();) {
    Round& r = it->second;
    if (now - r.started < std::chrono::duration<double>(timeout_s_)) {
      ++it;
      continue;
    }
    std::string missing;
    for (int rank = 0; rank < num_workers_; ++rank) {
      if (!r.arrived[rank]) missing += (missing.empty() ? "" : ", ") + std::to_string(rank);
    }
    Status s = r.error.ok()
                   ? DeadlineExceeded("timed out after " + std::to_string(int(timeout_s_)) +
                                      " s (TFPS_TIMEOUT) waiting for worker(s) " + missing +
                                      " to push (" + Where(server_id_, it->first) +
                                      "); is that worker stuck, dead or running other code?")
                   : r.error;
    TFPS_LOG(Warning) << s.message();
    Fail(r, s, out);
    it = rounds_.erase(it);
  }
}

}  // namespace tfps

#include "ps_server/sum_rounds.h"

#include <algorithm>
#include <memory>
#include <sstream>
#include <utility>

#include "ps_server/process_sets.h"
#include "ps_server/reduce.h"
#include "tf_ps_ops/cc/codec/codec.h"
#include "tf_ps_ops/cc/common/logging.h"

namespace tfps {

std::string Where(int server_id, const RoundId& id) {
  return "server " + std::to_string(server_id) + ", step " + std::to_string(std::get<2>(id)) +
         ", partition " + std::to_string(std::get<1>(id));
}

SumRounds::SumRounds(int num_workers, int server_id, const StallPolicy& stall)
    : num_workers_(num_workers), server_id_(server_id), stall_(stall) {}

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
  r.members = head.members;
  r.expected = r.members.empty() ? num_workers_ : static_cast<int>(r.members.size());
  for (int rank = 0; rank < num_workers_; ++rank) {
    if (!InProcessSet(r.members, rank)) r.answered[rank] = true;  // never pushes, gets nothing
  }
  for (int rank : join_order_) {
    if (InProcessSet(r.members, rank) && rank != head.header.sender && CountsJoined(r, rank)) {
      MarkJoined(r, rank);
    }
  }
  auto lost = lost_.begin();  // a step that needs a worker already gone cannot complete
  while (lost != lost_.end() && !InProcessSet(r.members, lost->first)) ++lost;
  if (lost != lost_.end()) {
    r.error = Unavailable("worker " + std::to_string(lost->first) + " is gone (" + lost->second +
                          "); the step cannot complete (" + Where(server_id_, id) + ")");
  }
  return r;
}
bool SumRounds::Add(const Head& pushed, Buffer payload, double received_us,
                    std::vector<Outgoing>* out, Round* complete) {
  Head shifted;
  const Head& head = InRoundSteps(pushed, &shifted);
  const Header& h = head.header;
  const RoundId id{h.key, h.partition, h.step};
  Status set = CheckSetMember(head, id);
  if (!set.ok()) {
    out->push_back(ErrorReply(h, h.sender, server_id_, set));
    return false;
  }
  Round& r = Open(head, id);
  if (!MarkArrived(r, pushed, head, received_us, out)) return false;
  Accumulate(r, head, &payload, out);
  if (r.num_arrived < r.expected) return false;
  const bool ok = r.error.ok();
  if (ok && r.sum.borrowed()) {  // answers and parameters live in the server's own memory
    r.sum = Buffer::CopyOf(r.sum.data(), r.sum.size());
  }
  if (ok) ReduceJoinedZeros(r);  // after the copy: never into a worker's segment
  if (ok) *complete = std::move(r);
  rounds_.erase(id);
  return ok;
}
bool SumRounds::MarkArrived(Round& r, const Head& pushed, const Head& head, double received_us,
                            std::vector<Outgoing>* out) {
  const Header& h = head.header;
  if (h.step != pushed.header.step) {
    r.step_behind.resize(num_workers_, 0);
    r.step_behind[h.sender] = h.step - pushed.header.step;
  }
  if (r.arrived[h.sender]) {
    out->push_back(ErrorReply(pushed.header, h.sender, server_id_,
                              Internal("pushed twice for the same step (" +
                                       Where(server_id_, r.id) + ")")));
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
  return true;
}

void SumRounds::Accumulate(Round& r, const Head& head, Buffer* payload,
                           std::vector<Outgoing>* out) {
  const Header& h = head.header;
  if (r.error.ok() && (h.flags & kFlagAbortRound) != 0) {
    r.error = FailedPrecondition(
        "worker " + std::to_string(h.sender) + " could not take part in this collective: " +
        EscapeForLog(std::string(static_cast<const char*>(payload->data()), payload->size()),
                     1024) +
        " (" + Where(server_id_, r.id) + "); the next collective can proceed");
  }
  if (r.error.ok()) r.error = Mismatch(r, head);
  bool summed = false;  // a compressed push decoded straight into the sum
  if (r.error.ok() && h.codec != 0) r.error = DecodeInto(r, h, payload, &summed);
  if (!r.error.ok()) {
    Fail(r, r.error, out);
  } else if (summed) {
    // already added to r.sum
  } else if ((h.flags & kFlagSparse) != 0) {
    r.rows.resize(num_workers_);
    r.rows[h.sender] = std::move(*payload);  // merged at the end, in rank order
  } else if ((h.flags & kFlagNoData) == 0) {
    ReduceDense(r, h, payload);
  } else if (!r.has_data && r.sum.owner() == nullptr) {
    // Kept until data comes or the round ends: the push that opened the round goes on
    // counting against its sender (push_budget.h) while the round waits.
    r.sum = std::move(*payload);
  }
}

void SumRounds::ReduceDense(Round& r, const Header& h, Buffer* payload) {
  if (!r.has_data) {
    r.sum = std::move(*payload);  // the first data push is the accumulator: no copy
    r.has_data = true;
    return;
  }
  // A borrowed accumulator (a colocated worker's shared memory) is never written. For
  // a sum or product, the first push of our own takes its place: the two operands
  // swap, which changes no bit (IEEE addition and multiplication commute; NaN payloads
  // aside); later ones keep their order. Min and max do not commute on signed zeros
  // (min(-0, +0) keeps its first operand), so they copy.
  const auto op = static_cast<ReduceOp>(h.reduce_op);
  if (r.sum.borrowed() && !payload->borrowed() &&
      (op == ReduceOp::kSum || op == ReduceOp::kProduct)) {
    std::swap(r.sum, *payload);
  } else if (r.sum.borrowed()) {
    r.sum = Buffer::CopyOf(r.sum.data(), r.sum.size());
  }
  ReduceInto(static_cast<ReduceOp>(h.reduce_op), static_cast<DType>(h.dtype), r.sum.data(),
             payload->data(), h.count);
}

void SumRounds::SetWorkerHosts(const std::vector<std::string>& hosts) {
  hosts_ = hosts;
  leader_of_.assign(hosts.size(), -1);
  for (size_t r = 0; r < hosts.size(); ++r) {
    for (size_t first = 0; first <= r; ++first) {
      if (hosts[first] == hosts[r]) {
        leader_of_[r] = static_cast<int>(first);
        break;
      }
    }
  }
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
  // Only a host's leader pushes its local sum, and only for its host's ranks: any other
  // worker (mistaken or hostile) would complete the round for ranks it does not speak for.
  const bool checked = static_cast<int>(leader_of_.size()) == num_workers_;
  if (checked && leader_of_[h.sender] != h.sender) {
    return InvalidArgument("worker " + std::to_string(h.sender) + " pushed a local sum "
                           "(hierarchical aggregation) but is not its host's local leader: "
                           "worker " + std::to_string(leader_of_[h.sender]) + " is, the "
                           "lowest rank on host " + EscapeForLog(hosts_[h.sender]) +
                           "; refused (" + Where(server_id_, r.id) + ")");
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
    if (checked && leader_of_[rank] != h.sender) {
      return InvalidArgument("worker " + std::to_string(h.sender) + " (host " +
                             EscapeForLog(hosts_[h.sender]) + ") pushed a local sum for rank " +
                             std::to_string(rank) + ", which is not on its host (rank " +
                             std::to_string(rank) + " is on host " +
                             EscapeForLog(hosts_[rank]) + ", local leader worker " +
                             std::to_string(leader_of_[rank]) + "); refused (" +
                             Where(server_id_, r.id) + ")");
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
Status SumRounds::DecodeInto(Round& r, const Header& h, Buffer* payload, bool* summed) {
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
  const auto* in = reinterpret_cast<const uint8_t*>(payload->data());
  const bool adds = r.has_data && CodecDecodesAdding(id) &&
                    h.reduce_op == static_cast<uint8_t>(ReduceOp::kSum) &&
                    (h.flags & (kFlagNoData | kFlagSparse)) == 0 &&
                    r.sum.size() == h.count * sizeof(float);
  if (adds) {
    // One pass: no decoded copy to write and read back.
    TFPS_RETURN_IF_ERROR(DecodeAdd(id, in, h.count, reinterpret_cast<float*>(r.sum.data())));
    *payload = Buffer();
    *summed = true;
    return Status::Ok();
  }
  Buffer decoded;
  if (r.has_data) {  // summed into r.sum and dropped before the next push is decoded
    scratch_.resize(h.count);
    decoded = Buffer::Adopt(scratch_.data(), h.count * sizeof(float), nullptr);
  } else if ((h.flags & (kFlagPsInit | kFlagPsApply)) == 0) {  // a sum re-encoded, then dropped
    decoded = SumBuffer(h.count);
  } else {
    decoded = Buffer::Allocate(h.count * sizeof(float));
  }
  TFPS_RETURN_IF_ERROR(Decode(id, in, h.count, k,
                              RandomKSeed(h.key, h.partition, h.step),
                              reinterpret_cast<float*>(decoded.data())));
  if (!r.has_data && payload->owner() != nullptr) {
    // The decoding becomes the round's sum: it keeps the push alive, which counts the
    // float32 sum against its sender (push_budget.h) while the round waits.
    auto both = std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<void>>>(
        decoded.owner(), payload->owner());
    decoded = Buffer::Adopt(decoded.data(), decoded.size(), std::move(both));
  }
  *payload = std::move(decoded);
  return Status::Ok();
}

Buffer SumRounds::SumBuffer(uint64_t count) {
  const size_t bytes = count * sizeof(float);
  size_t held = 0;
  for (const auto& v : sums_) {
    // Held by the pool alone: its round is answered (KeyStore::Compress replaced the sum
    // by its encoding) or gone.
    if (v.use_count() == 1 && v->size() == count) return Buffer::Adopt(v->data(), bytes, v);
    held += v->size() * sizeof(float);
  }
  if (held + bytes > kMaxPooledSumBytes) return Buffer::Allocate(bytes);
  auto v = std::make_shared<std::vector<float>>(count);
  sums_.push_back(v);
  return Buffer::Adopt(v->data(), bytes, v);
}

void SumRounds::Fail(Round& round, const Status& status, std::vector<Outgoing>* out) const {
  for (int rank = 0; rank < num_workers_; ++rank) {
    if (!round.arrived[rank] || round.answered[rank]) continue;
    round.answered[rank] = true;
    Header about = round.first;
    if (!round.step_behind.empty()) about.step -= round.step_behind[rank];
    out->push_back(ErrorReply(about, rank, server_id_, status));
  }
}

void SumRounds::OnWorkerLost(int rank, const std::string& why, std::vector<Outgoing>* out) {
  lost_[rank] = why;
  if (!join_order_.empty() &&
      std::find(join_order_.begin(), join_order_.end(), rank) == join_order_.end()) {
    FailJoins(Unavailable("join(): worker " + std::to_string(rank) + " is gone (" + why +
                          ") before joining (server " + std::to_string(server_id_) + ")"),
              out);
  }
  for (auto it = rounds_.begin(); it != rounds_.end();) {
    Round& r = it->second;
    if (r.arrived[rank] || !InProcessSet(r.members, rank)) {
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
void SumRounds::SubmittedAndMissing(const Round& r, std::vector<int>* submitted,
                                    std::vector<int>* missing) const {
  for (int rank = 0; rank < num_workers_; ++rank) {
    if (!InProcessSet(r.members, rank)) continue;
    (r.arrived[rank] ? submitted : missing)->push_back(rank);
  }
}

void SumRounds::OnTick(Clock::time_point now, std::vector<Outgoing>* out,
                       std::vector<std::string>* warnings) {
  OnJoinTick(now, out, warnings);
  // The rounds due a warning, one line per (submitted, missing): a step of many tensors
  // stalled on the same ranks is one line, not one per partition.
  struct Stalled {
    std::vector<std::string> rounds;
    double waited_s = 0;
  };
  std::map<std::pair<std::string, std::string>, Stalled> stalled;
  for (auto it = rounds_.begin(); it != rounds_.end();) {
    Round& r = it->second;
    const bool shutdown = StallShutdownDue(stall_, r.started, now);
    const bool warn = !shutdown && warnings &&
                      StallWarningDue(stall_, r.started, now, &r.stall_warnings);
    if (!shutdown && !warn) {
      ++it;
      continue;
    }
    std::vector<int> submitted, missing;
    SubmittedAndMissing(r, &submitted, &missing);
    const std::string what = TensorOfKey(std::get<0>(it->first)) + " (" +
                             Where(server_id_, it->first) + ")";
    if (warn) {
      Stalled& s = stalled[{RankList(submitted), RankList(missing)}];
      s.rounds.push_back(what);
      s.waited_s = std::max(s.waited_s, SecondsSince(r.started, now));
      ++it;
      continue;
    }
    Status s = r.error.ok()
                   ? StallShutdownStatus(stall_, what, RankList(submitted), RankList(missing))
                   : r.error;
    TFPS_LOG(Warning) << s.message();
    Fail(r, s, out);
    it = rounds_.erase(it);
  }
  constexpr size_t kNamed = 4;  // rounds named in one warning line; the rest counted
  for (const auto& kv : stalled) {
    const Stalled& s = kv.second;
    std::string what;
    for (size_t i = 0; i < s.rounds.size() && i < kNamed; ++i) {
      what += (i == 0 ? "" : ", ") + s.rounds[i];
    }
    if (s.rounds.size() > kNamed) {
      what += " and " + std::to_string(s.rounds.size() - kNamed) + " more";
    }
    warnings->push_back(StallWarningText(what, kv.first.first, kv.first.second, s.waited_s));
  }
}

}  // namespace tfps

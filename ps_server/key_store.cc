#include "ps_server/key_store.h"

#include <algorithm>
#include <cstring>

#include "ps_server/optimizers.h"
#include "ps_server/reduce.h"
#include "tf_ps_ops/cc/common/logging.h"

namespace tfps {

std::string WorkerIdentity(int rank) { return "w" + std::to_string(rank); }

KeyStore::KeyStore(int num_workers, int server_id, double timeout_s)
    : num_workers_(num_workers), server_id_(server_id), timeout_s_(timeout_s) {}

std::string KeyStore::Where(const RoundId& id) const {
  return "server " + std::to_string(server_id_) + ", step " + std::to_string(std::get<2>(id)) +
         ", partition " + std::to_string(std::get<1>(id));
}

Outgoing KeyStore::ErrorReply(const Header& about, int rank, const Status& status) const {
  Head head = HeadAbout(about, MsgType::kError, server_id_);
  head.header.status = static_cast<uint32_t>(status.code());
  const std::string& text = status.message();
  return Outgoing{WorkerIdentity(rank), EncodeHead(head), zmq::message_t(text.data(), text.size())};
}

void KeyStore::OnPush(const Head& head, zmq::message_t payload, std::vector<Outgoing>* out,
                      double received_us) {
  const Header& h = head.header;
  const RoundId id{h.key, h.partition, h.step};
  auto it = rounds_.find(id);
  if (it == rounds_.end()) {
    it = rounds_.emplace(id, Round()).first;
    Round& r = it->second;
    r.first = h;
    r.dims = head.dims;
    r.params = head.params;
    r.first_sender = h.sender;
    r.arrived.assign(num_workers_, false);
    r.answered.assign(num_workers_, false);
    r.started = Clock::now();
    for (const auto& lost : lost_) {
      if (!r.error.ok()) break;
      r.error = Unavailable("worker " + std::to_string(lost.first) + " is gone (" + lost.second +
                            "); the step cannot complete (" + Where(id) + ")");
    }
  }
  Round& r = it->second;
  if (r.arrived[h.sender]) {
    out->push_back(ErrorReply(h, h.sender, Internal("pushed twice for the same step (" +
                                                    Where(id) + ")")));
    return;
  }
  r.arrived[h.sender] = true;
  ++r.num_arrived;
  if ((h.flags & kFlagTimed) != 0) {
    r.received_us.resize(num_workers_, 0.0);
    r.received_us[h.sender] = received_us;
  }
  constexpr uint32_t kModeFlags = kFlagPsInit | kFlagPsApply | kFlagPsOverwrite | kFlagSparse;
  // (kFlagTimed may differ: one worker's timeline is its own business)
  const bool sparse = (h.flags & kFlagSparse) != 0;  // row counts differ between workers
  if (r.error.ok() && ((h.flags & kModeFlags) != (r.first.flags & kModeFlags) ||
                       h.optimizer != r.first.optimizer)) {
    r.error = InvalidArgument("workers disagree on how to update this tensor: worker " +
                              std::to_string(r.first_sender) + " asked for " +
                              OptimizerName(static_cast<Optimizer>(r.first.optimizer)) +
                              ", worker " + std::to_string(h.sender) + " for " +
                              OptimizerName(static_cast<Optimizer>(h.optimizer)) + " (" +
                              Where(id) + ")");
  }
  if (r.error.ok() && (h.dtype != r.first.dtype || head.dims != r.dims ||
                       (!sparse && h.count != r.first.count) || h.num_partitions != r.first.num_partitions)) {
    r.error = InvalidArgument(
        "shape or dtype differs between workers: worker " + std::to_string(r.first_sender) +
        " sent " + DescribeTensor(static_cast<DType>(r.first.dtype), r.dims) + ", worker " +
        std::to_string(h.sender) + " sent " +
        DescribeTensor(static_cast<DType>(h.dtype), head.dims) + " (" + Where(id) + ")");
  }
  if (!r.error.ok()) {
    Fail(r, r.error, out);
  } else if (sparse) {
    r.rows.resize(num_workers_);
    r.rows[h.sender] = std::move(payload);  // summed at the end, in rank order
  } else if ((h.flags & kFlagNoData) == 0) {
    if (!r.has_data) {
      r.sum = std::move(payload);  // the first data push is the accumulator: no copy
      r.has_data = true;
    } else {
      SumInto(static_cast<DType>(h.dtype), r.sum.data(), payload.data(), h.count);
    }
  }
  if (r.num_arrived == num_workers_) {
    if (r.error.ok()) Answer(id, r, out);
    rounds_.erase(it);
  }
}

void KeyStore::Answer(const RoundId& id, Round& round, std::vector<Outgoing>* out) {
  Head head;
  const bool sparse = (round.first.flags & kFlagSparse) != 0;
  if (sparse) {
    zmq::message_t reply;
    uint64_t rows = 0;
    Status s = FinishSparseRound(id, round, &reply, &rows);
    if (!s.ok()) {
      round.answered.assign(num_workers_, false);
      Fail(round, s, out);
      return;
    }
    round.sum = std::move(reply);
    head.header.count = rows;
    head.dims = round.dims;  // the worker checks the rows against the shape
  }
  const size_t bytes = round.first.count * DTypeSize(static_cast<DType>(round.first.dtype));
  if (!sparse && !round.has_data) {  // nobody contributed (cannot happen for a valid broadcast)
    round.sum.rebuild(bytes);
    std::memset(round.sum.data(), 0, bytes);
  }
  if (!sparse && (round.first.flags & (kFlagPsInit | kFlagPsApply)) != 0) {
    zmq::message_t reply;
    Status s = FinishPsRound(id, round, &reply);
    if (!s.ok()) {
      round.answered.assign(num_workers_, false);
      Fail(round, s, out);
      return;
    }
    round.sum = std::move(reply);
  }
  const uint64_t count = sparse ? head.header.count : round.first.count;
  head.header = round.first;
  head.header.type = static_cast<uint16_t>(MsgType::kPushPullReply);
  head.header.flags = sparse ? kFlagSparse : 0;
  head.header.count = count;
  head.header.optimizer = 0;
  head.header.sender = server_id_;
  const std::string encoded = EncodeHead(head);
  const double ready_us = round.received_us.empty() ? 0 : WallMicros();
  for (int rank = 0; rank < num_workers_; ++rank) {
    zmq::message_t copy;
    copy.copy(round.sum);  // shares the buffer (reference counted), no byte copy
    const bool timed = !round.received_us.empty() && round.received_us[rank] > 0;
    if (timed) {  // this worker keeps a timeline: its own stamps
      Head stamped = head;
      stamped.header.flags |= kFlagTimed;
      stamped.params = {round.received_us[rank], ready_us};
      out->push_back(Outgoing{WorkerIdentity(rank), EncodeHead(stamped), std::move(copy)});
    } else {
      out->push_back(Outgoing{WorkerIdentity(rank), encoded, std::move(copy)});
    }
  }
}

namespace {

std::vector<char> FilledBuffer(DType dtype, uint64_t count, double fill) {
  std::vector<char> buffer(count * DTypeSize(dtype));
  for (uint64_t i = 0; i < count; ++i) {
    if (dtype == DType::kFloat32) reinterpret_cast<float*>(buffer.data())[i] = float(fill);
    else reinterpret_cast<double*>(buffer.data())[i] = fill;
  }
  return buffer;
}

}  // namespace

Status KeyStore::FinishPsRound(const RoundId& id, Round& round, zmq::message_t* reply) {
  const Header& h = round.first;
  const DType dtype = static_cast<DType>(h.dtype);
  const ParamId pid(std::get<0>(id), std::get<1>(id));
  auto it = params_.find(pid);
  if ((h.flags & kFlagPsInit) != 0) {
    if (dtype != DType::kFloat32 && dtype != DType::kFloat64) {
      return InvalidArgument(std::string("PS mode holds float32 and float64 parameters, not ") +
                             DTypeName(dtype));
    }
    if (it != params_.end() && (it->second.dtype != dtype || it->second.count != h.count)) {
      return InvalidArgument("the server holds " + std::to_string(it->second.count) + " " +
                             DTypeName(it->second.dtype) + " elements for this partition "
                             "(restored from a checkpoint of another model?), the worker sent " +
                             DescribeTensor(dtype, round.dims) + " (" + Where(id) + ")");
    }
    const char* data = static_cast<const char*>(round.sum.data());
    if (it == params_.end()) {  // first init wins; later ones (a restarted worker) read it
      Param p;
      p.dtype = dtype;
      p.count = h.count;
      p.value.assign(data, data + round.sum.size());
      it = params_.emplace(pid, std::move(p)).first;
    } else if ((h.flags & kFlagPsOverwrite) != 0) {
      // A restored value: the slots belong to the trajectory it replaces, so the next
      // update starts them afresh. The update count stays (it counts history).
      Param& p = it->second;
      p.value.assign(data, data + round.sum.size());
      p.slots.clear();
      p.optimizer = Optimizer::kNone;
    }
  } else {
    Param* p = nullptr;
    TFPS_RETURN_IF_ERROR(ParamToUpdate(id, round, &p));
    if (p->count != h.count) {
      return InvalidArgument("the gradient " + DescribeTensor(dtype, round.dims) +
                             " does not match the parameter held (" + DTypeName(p->dtype) + ", " +
                             std::to_string(p->count) + " elements in this partition; " +
                             Where(id) + ")");
    }
    const auto optimizer = static_cast<Optimizer>(h.optimizer);
    const std::vector<double> hyper(round.params.begin(),
                                    round.params.begin() + OptimizerParamCount(optimizer));
    TFPS_RETURN_IF_ERROR(ApplyOptimizer(optimizer, hyper, dtype, p->value.data(), &p->slots,
                                        round.sum.data(), h.count, num_workers_));
    CountUpdate(*p);
  }
  // A snapshot: the parameter changes again next step while replies may still be queued.
  reply->rebuild(it->second.value.data(), it->second.value.size());
  return Status::Ok();
}

Status KeyStore::ParamToUpdate(const RoundId& id, const Round& round, Param** param) {
  const Header& h = round.first;
  const DType dtype = static_cast<DType>(h.dtype);
  auto it = params_.find(ParamId(std::get<0>(id), std::get<1>(id)));
  if (it == params_.end()) {
    return FailedPrecondition("the parameter was never initialised on this server (" +
                              Where(id) + "): the first PS update of a variable must be "
                              "preceded by its init push");
  }
  Param& p = it->second;
  if (p.dtype != dtype) {
    return InvalidArgument("the gradient " + DescribeTensor(dtype, round.dims) +
                           " does not match the parameter held (" + DTypeName(p.dtype) + "; " +
                           Where(id) + ")");
  }
  const auto optimizer = static_cast<Optimizer>(h.optimizer);
  if (p.optimizer == Optimizer::kNone) {
    // First update: create the slots from the initial values after the hyperparameters
    // (e.g. Adagrad's 0.1, v1 RMSProp's 1.0).
    for (size_t k = OptimizerParamCount(optimizer); k < round.params.size(); ++k) {
      p.slots.push_back(FilledBuffer(dtype, p.count, round.params[k]));
    }
    p.optimizer = optimizer;
  } else if (p.optimizer != optimizer) {
    return InvalidArgument(std::string("this parameter is updated with ") +
                           OptimizerName(p.optimizer) + "; a " + OptimizerName(optimizer) +
                           " update cannot use its slots (" + Where(id) + ")");
  }
  *param = &p;
  return Status::Ok();
}

void KeyStore::CountUpdate(Param& p) {
  if (p.updates > 0 && --update_counts_[p.updates] == 0) update_counts_.erase(p.updates);
  ++update_counts_[++p.updates];
}

// Sums the workers' rows per row id (workers in rank order, so every run sums alike),
// updates those rows only and answers [ids][new values] of the union of rows touched.
Status KeyStore::FinishSparseRound(const RoundId& id, Round& round, zmq::message_t* reply,
                                   uint64_t* num_rows) {
  const Header& h = round.first;
  const DType dtype = static_cast<DType>(h.dtype);
  const size_t elem = DTypeSize(dtype);
  Param* p = nullptr;
  TFPS_RETURN_IF_ERROR(ParamToUpdate(id, round, &p));
  const uint64_t row = RowElements(round.dims);
  if (row == 0 || p->count % row != 0) {
    return InvalidArgument("the parameter held (" + std::to_string(p->count) +
                           " elements in this partition) is not whole rows of " +
                           DescribeTensor(dtype, round.dims) + " (" + Where(id) + ")");
  }
  const uint64_t rows_here = p->count / row;
  const size_t row_bytes = row * elem;
  std::vector<int64_t> ids;
  for (const zmq::message_t& push : round.rows) {
    const uint64_t n = push.size() / (sizeof(int64_t) + row_bytes);
    const auto* pushed = static_cast<const int64_t*>(push.data());
    for (uint64_t i = 0; i < n; ++i) {
      if (pushed[i] < 0 || static_cast<uint64_t>(pushed[i]) >= rows_here ||
          (i > 0 && pushed[i] <= pushed[i - 1])) {
        return InvalidArgument("sparse row id " + std::to_string(pushed[i]) +
                               " is out of order or outside the " + std::to_string(rows_here) +
                               " rows of this partition (" + Where(id) + ")");
      }
    }
    ids.insert(ids.end(), pushed, pushed + n);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::vector<char> sums(ids.size() * row_bytes, 0);  // zero bits: 0.0 in float and double
  for (const zmq::message_t& push : round.rows) {
    const uint64_t n = push.size() / (sizeof(int64_t) + row_bytes);
    const auto* pushed = static_cast<const int64_t*>(push.data());
    const char* values = reinterpret_cast<const char*>(pushed + n);
    for (uint64_t i = 0; i < n; ++i) {
      const size_t at = std::lower_bound(ids.begin(), ids.end(), pushed[i]) - ids.begin();
      SumInto(dtype, sums.data() + at * row_bytes, values + i * row_bytes, row);
    }
  }
  const auto optimizer = static_cast<Optimizer>(h.optimizer);
  const std::vector<double> hyper(round.params.begin(),
                                  round.params.begin() + OptimizerParamCount(optimizer));
  TFPS_RETURN_IF_ERROR(ApplyOptimizerRows(optimizer, hyper, dtype, p->value.data(), &p->slots,
                                          sums.data(), ids.data(), ids.size(), row,
                                          num_workers_));
  CountUpdate(*p);
  reply->rebuild(ids.size() * (sizeof(int64_t) + row_bytes));
  auto* out_ids = static_cast<int64_t*>(reply->data());
  std::copy(ids.begin(), ids.end(), out_ids);
  char* out_rows = reinterpret_cast<char*>(out_ids + ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    std::memcpy(out_rows + i * row_bytes, p->value.data() + ids[i] * row_bytes, row_bytes);
  }
  *num_rows = ids.size();
  return Status::Ok();
}

void KeyStore::RestoreParams(ShardParams params) {
  params_ = std::move(params);
  update_counts_.clear();
  for (const auto& entry : params_) {
    if (entry.second.updates > 0) ++update_counts_[entry.second.updates];
  }
  MarkCheckpointed();
}

bool KeyStore::CheckpointDue(uint64_t every) const {
  if (every == 0 || update_counts_.size() != 1) return false;
  const std::pair<uint64_t, size_t> state = *update_counts_.begin();
  return state.first % every == 0 && state != checkpointed_;
}

void KeyStore::MarkCheckpointed() {
  if (update_counts_.size() == 1) checkpointed_ = *update_counts_.begin();
}

void KeyStore::Fail(Round& round, const Status& status, std::vector<Outgoing>* out) {
  for (int rank = 0; rank < num_workers_; ++rank) {
    if (!round.arrived[rank] || round.answered[rank]) continue;
    round.answered[rank] = true;
    out->push_back(ErrorReply(round.first, rank, status));
  }
}

void KeyStore::OnWorkerLost(int rank, const std::string& why, std::vector<Outgoing>* out) {
  lost_[rank] = why;
  for (auto it = rounds_.begin(); it != rounds_.end();) {
    Round& r = it->second;
    if (r.arrived[rank]) {
      ++it;
      continue;
    }
    if (r.error.ok()) {
      r.error = Unavailable("worker " + std::to_string(rank) + " is gone (" + why +
                            ") before pushing; the step cannot complete (" + Where(it->first) +
                            ")");
    }
    Fail(r, r.error, out);
    it = rounds_.erase(it);
  }
}

void KeyStore::OnTick(Clock::time_point now, std::vector<Outgoing>* out) {
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
                                      " to push (" + Where(it->first) +
                                      "); is that worker stuck, dead or running other code?")
                   : r.error;
    TFPS_LOG(Warning) << s.message();
    Fail(r, s, out);
    it = rounds_.erase(it);
  }
}

}  // namespace tfps

#include "ps_server/parameter_store.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "ps_server/optimizers.h"
#include "ps_server/reduce.h"

namespace tfps {

namespace {

std::vector<char> FilledBuffer(DType dtype, uint64_t count, double fill) {
  std::vector<char> buffer(count * DTypeSize(dtype));
  for (uint64_t i = 0; i < count; ++i) {
    if (dtype == DType::kFloat32) reinterpret_cast<float*>(buffer.data())[i] = float(fill);
    else reinterpret_cast<double*>(buffer.data())[i] = fill;
  }
  return buffer;
}

ParamId ParamOf(const Round& round) {
  return ParamId(std::get<0>(round.id), std::get<1>(round.id));
}

// The optimizer's hyperparameters: what the push carries before the slots' initial values.
std::vector<double> Hyperparameters(const Round& round) {
  const auto optimizer = static_cast<Optimizer>(round.first.optimizer);
  return std::vector<double>(round.params.begin(),
                             round.params.begin() + OptimizerParamCount(optimizer));
}

}  // namespace

ParameterStore::ParameterStore(int num_workers, int server_id)
    : num_workers_(num_workers), server_id_(server_id) {}

Status ParameterStore::Init(const Round& round, Buffer* reply) {
  const Header& h = round.first;
  const DType dtype = static_cast<DType>(h.dtype);
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64) {
    return InvalidArgument(std::string("PS mode holds float32 and float64 parameters, not ") +
                           DTypeName(dtype));
  }
  auto it = params_.find(ParamOf(round));
  if (it != params_.end() && (it->second.dtype != dtype || it->second.count != h.count)) {
    return InvalidArgument("the server holds " + std::to_string(it->second.count) + " " +
                           DTypeName(it->second.dtype) + " elements for this partition "
                           "(restored from a checkpoint of another model?), the worker sent " +
                           DescribeTensor(dtype, round.dims) + " (" +
                           Where(server_id_, round.id) + ")");
  }
  if ((h.flags & kFlagPsSlot) != 0) {
    if (it == params_.end()) {
      return FailedPrecondition("the parameter was never initialised on this server (" +
                                Where(server_id_, round.id) + "): its slots cannot be read "
                                "or written before its init push");
    }
    return Slot(round, it->second, reply);
  }
  const char* data = round.sum.data();
  if (it == params_.end()) {  // first init wins; later ones (a restarted worker) read it
    ShardParam p;
    p.dtype = dtype;
    p.count = h.count;
    p.value.assign(data, data + round.sum.size());
    it = params_.emplace(ParamOf(round), std::move(p)).first;
  } else if ((h.flags & kFlagPsOverwrite) != 0) {
    // A restored value: the slots belong to the trajectory it replaces, so the next update
    // starts them afresh. The update count stays (it counts history).
    ShardParam& p = it->second;
    p.value.assign(data, data + round.sum.size());
    p.slots.clear();
    p.optimizer = Optimizer::kNone;
  }
  *reply = Buffer::CopyOf(it->second.value.data(), it->second.value.size());
  return Status::Ok();
}

Status ParameterStore::Slot(const Round& round, ShardParam& p, Buffer* reply) {
  const double index = round.params.empty() ? -2.0 : round.params[0];
  if (!(index >= -1 && index < kMaxParams) || index != static_cast<double>(static_cast<int>(index))) {
    return InvalidArgument("slot index " + std::to_string(index) + " is not -1 (the optimizer) "
                           "or a slot (" + Where(server_id_, round.id) + ")");
  }
  const int k = static_cast<int>(index);
  const size_t bytes = p.value.size();
  if ((round.first.flags & kFlagPsOverwrite) == 0) {  // a read
    if (k == -1) {
      *reply = Buffer::CopyOf(FilledBuffer(p.dtype, p.count, static_cast<double>(p.optimizer)).data(),
                              bytes);
    } else if (static_cast<size_t>(k) < p.slots.size()) {
      *reply = Buffer::CopyOf(p.slots[k].data(), bytes);
    } else {
      *reply = Buffer::CopyOf(FilledBuffer(p.dtype, p.count, 0.0).data(), bytes);
    }
    return Status::Ok();
  }
  const char* data = round.sum.data();
  if (k == -1) {  // every element holds the code; a partition of 0 elements has none
    double code = 0;
    if (p.count > 0) {
      code = p.dtype == DType::kFloat32 ? *reinterpret_cast<const float*>(data)
                                        : *reinterpret_cast<const double*>(data);
    }
    const auto optimizer = static_cast<Optimizer>(static_cast<int>(code));
    if (code != 0 && (code != static_cast<double>(static_cast<int>(code)) ||
                      FindOptimizerSpec(optimizer) == nullptr)) {
      return InvalidArgument("optimizer code " + std::to_string(code) + " is unknown (" +
                             Where(server_id_, round.id) + ")");
    }
    p.optimizer = optimizer;
    p.slots.assign(OptimizerSlotCount(optimizer), std::vector<char>(bytes, 0));
  } else if (static_cast<size_t>(k) < p.slots.size()) {  // else: a slot this partition lacks
    p.slots[k].assign(data, data + bytes);
  }
  *reply = Buffer::CopyOf(p.value.data(), bytes);
  return Status::Ok();
}

Status ParameterStore::Apply(const Round& round, Buffer* reply) {
  const Header& h = round.first;
  const DType dtype = static_cast<DType>(h.dtype);
  ShardParam* p = nullptr;
  TFPS_RETURN_IF_ERROR(ToUpdate(round, &p));
  if (p->count != h.count) {
    return InvalidArgument("the gradient " + DescribeTensor(dtype, round.dims) +
                           " does not match the parameter held (" + DTypeName(p->dtype) + ", " +
                           std::to_string(p->count) + " elements in this partition; " +
                           Where(server_id_, round.id) + ")");
  }
  TFPS_RETURN_IF_ERROR(ApplyOptimizer(static_cast<Optimizer>(h.optimizer), Hyperparameters(round),
                                      dtype, p->value.data(), &p->slots, round.sum.data(),
                                      h.count, num_workers_));
  CountUpdate(*p);
  *reply = Buffer::CopyOf(p->value.data(), p->value.size());
  return Status::Ok();
}

Status ParameterStore::ToUpdate(const Round& round, ShardParam** param) {
  const Header& h = round.first;
  const DType dtype = static_cast<DType>(h.dtype);
  auto it = params_.find(ParamOf(round));
  if (it == params_.end()) {
    return FailedPrecondition("the parameter was never initialised on this server (" +
                              Where(server_id_, round.id) + "): the first PS update of a variable must be "
                              "preceded by its init push");
  }
  ShardParam& p = it->second;
  if (p.dtype != dtype) {
    return InvalidArgument("the gradient " + DescribeTensor(dtype, round.dims) +
                           " does not match the parameter held (" + DTypeName(p.dtype) + "; " +
                           Where(server_id_, round.id) + ")");
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
                           " update cannot use its slots (" + Where(server_id_, round.id) + ")");
  }
  *param = &p;
  return Status::Ok();
}

void ParameterStore::CountUpdate(ShardParam& p) {
  if (p.updates > 0 && --update_counts_[p.updates] == 0) update_counts_.erase(p.updates);
  ++update_counts_[++p.updates];
}

// Sums the workers' rows per row id (workers in rank order, so every run sums alike),
// updates those rows only and answers [ids][new values] of the union of rows touched.
Status ParameterStore::ApplySparse(const Round& round, Buffer* reply, uint64_t* num_rows) {
  const Header& h = round.first;
  const DType dtype = static_cast<DType>(h.dtype);
  const size_t elem = DTypeSize(dtype);
  ShardParam* p = nullptr;
  TFPS_RETURN_IF_ERROR(ToUpdate(round, &p));
  const uint64_t row = RowElements(round.dims);
  if (row == 0 || p->count % row != 0) {
    return InvalidArgument("the parameter held (" + std::to_string(p->count) +
                           " elements in this partition) is not whole rows of " +
                           DescribeTensor(dtype, round.dims) + " (" + Where(server_id_, round.id) + ")");
  }
  const uint64_t rows_here = p->count / row;
  const size_t row_bytes = row * elem;
  std::vector<int64_t> ids;
  for (const Buffer& push : round.rows) {
    const uint64_t n = push.size() / (sizeof(int64_t) + row_bytes);
    const auto* pushed = reinterpret_cast<const int64_t*>(push.data());
    for (uint64_t i = 0; i < n; ++i) {
      if (pushed[i] < 0 || static_cast<uint64_t>(pushed[i]) >= rows_here ||
          (i > 0 && pushed[i] <= pushed[i - 1])) {
        return InvalidArgument("sparse row id " + std::to_string(pushed[i]) +
                               " is out of order or outside the " + std::to_string(rows_here) +
                               " rows of this partition (" + Where(server_id_, round.id) + ")");
      }
    }
    ids.insert(ids.end(), pushed, pushed + n);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::vector<char> sums(ids.size() * row_bytes, 0);  // zero bits: 0.0 in float and double
  for (const Buffer& push : round.rows) {
    const uint64_t n = push.size() / (sizeof(int64_t) + row_bytes);
    const auto* pushed = reinterpret_cast<const int64_t*>(push.data());
    const char* values = reinterpret_cast<const char*>(pushed + n);
    for (uint64_t i = 0; i < n; ++i) {
      const size_t at = std::lower_bound(ids.begin(), ids.end(), pushed[i]) - ids.begin();
      SumInto(dtype, sums.data() + at * row_bytes, values + i * row_bytes, row);
    }
  }
  TFPS_RETURN_IF_ERROR(ApplyOptimizerRows(static_cast<Optimizer>(h.optimizer),
                                          Hyperparameters(round), dtype, p->value.data(), &p->slots,
                                          sums.data(), ids.data(), ids.size(), row,
                                          num_workers_));
  CountUpdate(*p);
  *reply = Buffer::Allocate(ids.size() * (sizeof(int64_t) + row_bytes));
  auto* out_ids = reinterpret_cast<int64_t*>(reply->data());
  std::copy(ids.begin(), ids.end(), out_ids);
  char* out_rows = reinterpret_cast<char*>(out_ids + ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    std::memcpy(out_rows + i * row_bytes, p->value.data() + ids[i] * row_bytes, row_bytes);
  }
  *num_rows = ids.size();
  return Status::Ok();
}

void ParameterStore::Restore(ShardParams params) {
  params_ = std::move(params);
  update_counts_.clear();
  for (const auto& entry : params_) {
    if (entry.second.updates > 0) ++update_counts_[entry.second.updates];
  }
  MarkCheckpointed();
}

bool ParameterStore::CheckpointDue(uint64_t every) const {
  if (every == 0 || update_counts_.size() != 1) return false;
  const std::pair<uint64_t, size_t> state = *update_counts_.begin();
  return state.first % every == 0 && state != checkpointed_;
}

void ParameterStore::MarkCheckpointed() {
  if (update_counts_.size() == 1) checkpointed_ = *update_counts_.begin();
}

}  // namespace tfps

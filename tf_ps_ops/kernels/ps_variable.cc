#include "tf_ps_ops/kernels/ps_variable.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <set>

#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/tensor_shape.h"
#include "tf_ps_ops/kernels/tf_adapter.h"

namespace tfps {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::Var;

namespace {

// Keys this process has initialised on the servers. Process-wide because a variable may be
// updated by several kernels (one per traced function) that must initialise it once.
std::mutex g_initialised_mu;
std::set<std::string> g_initialised;

double ScalarOf(const Tensor& t) {
  return t.dtype() == tensorflow::DT_FLOAT ? static_cast<double>(t.scalar<float>()())
                                           : t.scalar<double>()();
}

double FirstElementOf(const Tensor& t) {
  if (t.NumElements() == 0) return 0.0;
  return t.dtype() == tensorflow::DT_FLOAT ? static_cast<double>(t.flat<float>()(0))
                                           : t.flat<double>()(0);
}

int InputIndex(const tensorflow::OpKernel& kernel, const std::string& name) {
  int start = -1, stop = -1;
  return kernel.InputRange(name, &start, &stop).ok() ? start : -1;
}

}  // namespace

std::string PsKey(OpKernelContext* ctx, const std::string& tensor_name) {
  return tensor_name.empty() ? kPsKeyPrefix + HandleFromInput(ctx, 0).name() : tensor_name;
}

bool ClaimInitialisation(const std::string& key) {
  std::lock_guard<std::mutex> lock(g_initialised_mu);
  return g_initialised.insert(key).second;
}

void MarkInitialised(const std::string& key) { ClaimInitialisation(key); }

void ForgetInitialisation(const std::string& key) {
  std::lock_guard<std::mutex> lock(g_initialised_mu);
  g_initialised.erase(key);
}

absl::Status ReadValue(Var* var, const std::string& key, const std::string& missing,
                       Tensor* value) {
  tensorflow::tf_shared_lock lock(*var->mu());
  if (!var->is_initialized) {
    return absl::FailedPreconditionError("variable '" + key + "' " + missing);
  }
  *value = *var->tensor();
  return absl::OkStatus();
}

absl::Status PsMarshal::Init(tensorflow::OpKernelConstruction* ctx,
                             const tensorflow::OpKernel& kernel, const PsOpSpec& spec) {
  optimizer_ = FindOptimizerSpec(spec.optimizer);
  if (optimizer_ == nullptr) return absl::InternalError(spec.op + ": no optimizer");
  for (const std::string& name : optimizer_->params) {
    Source source;
    source.name = name;
    auto alias = spec.inputs.find(name);
    source.arg = alias == spec.inputs.end() ? name : alias->second;
    source.input = InputIndex(kernel, source.arg);
    auto fixed = spec.fixed.find(name);
    if (source.input >= 0) {
      // read at each push, so schedules work
    } else if (ctx->HasAttr(name)) {
      bool flag = false;
      TF_RETURN_IF_ERROR(ctx->GetAttr(name, &flag));
      source.value = flag ? 1.0 : 0.0;
    } else if (fixed != spec.fixed.end()) {
      source.value = fixed->second;
    } else {
      return absl::InternalError(spec.op + " gives the " + optimizer_->name +
                                 " optimizer no value for '" + name + "'");
    }
    params_.push_back(source);
  }
  for (const std::string& name : optimizer_->slots) {
    slots_.push_back(Source{name, name, InputIndex(kernel, name), 0.0});
  }
  return absl::OkStatus();
}

absl::Status PsMarshal::Collect(OpKernelContext* ctx, const std::string& key,
                                std::vector<double>* params, const SlotReader& read_slot) const {
  for (const Source& p : params_) {
    if (p.input < 0) {
      params->push_back(p.value);
      continue;
    }
    const Tensor& t = ctx->input(p.input);
    if (!tensorflow::TensorShapeUtils::IsScalar(t.shape())) {
      return absl::InvalidArgumentError(p.arg + " must be a scalar");
    }
    params->push_back(ScalarOf(t));
  }
  for (const Source& slot : slots_) {
    double value = 0.0;  // a slot the op has no input for (Adam's vhat without AMSGrad)
    if (slot.input >= 0) TF_RETURN_IF_ERROR(SlotInitialValue(ctx, slot, key, read_slot, &value));
    params->push_back(value);
  }
  return absl::OkStatus();
}

// The servers create the slot from its value: the first element, since optimizers
// initialise slots to a constant.
absl::Status PsMarshal::SlotInitialValue(OpKernelContext* ctx, const Source& slot,
                                         const std::string& key, const SlotReader& read_slot,
                                         double* value) const {
  const std::string what = ctx->op_kernel().type_string() + " of '" + key + "': the " +
                           optimizer_->name + " slot '" + slot.name + "'";
  tensorflow::core::RefCountPtr<Var> var;
  absl::Status s = LookupResource(ctx, HandleFromInput(ctx, slot.input), &var);
  if (!s.ok()) {
    return absl::FailedPreconditionError(what + " cannot be read: " + std::string(s.message()));
  }
  tensorflow::tf_shared_lock lock(*var->mu());
  if (!var->is_initialized) {
    return absl::FailedPreconditionError(what + " is used before it is initialised");
  }
  if (read_slot) return read_slot(slot.name, *var->tensor(), value);
  *value = FirstElementOf(*var->tensor());
  return absl::OkStatus();
}

void StoreDense(Var* var, const Tensor& fresh) {
  tensorflow::mutex_lock lock(*var->mu());
  *var->tensor() = fresh;
  var->is_initialized = true;
}

void StoreRows(Var* var, const SparseRows& rows) {
  tensorflow::mutex_lock lock(*var->mu());
  Tensor* t = var->tensor();
  // TF's sparse updates (EnsureSparseVariableAccess): the first one copies a buffer that
  // readers still hold and puts the variable in copy-on-read mode, where every dense read
  // gets its own copy; from then on rows are written in place. (Copying in copy-on-read
  // mode instead cost a 2 M x 64 table 512 MB per step, which row lookups put there.)
  if (!var->copy_on_read_mode.load()) {
    if (!t->RefCountIsOne()) {
      Tensor copy(t->dtype(), t->shape());
      std::memcpy(const_cast<char*>(copy.tensor_data().data()), t->tensor_data().data(),
                  t->tensor_data().size());
      *t = copy;
    }
    var->copy_on_read_mode.store(true);
  }
  WriteRows(rows, const_cast<char*>(t->tensor_data().data()));
}

Status ToUniqueRows(const Tensor& var, const Tensor& grad, const Tensor& indices,
                    SparseRows* out) {
  if (!tensorflow::TensorShapeUtils::IsVector(indices.shape())) {
    return InvalidArgument("indices must be a vector, got " + indices.shape().DebugString());
  }
  if (var.dims() < 1 || grad.dims() < 1 || var.dtype() != grad.dtype()) {
    return InvalidArgument("the variable and the gradient need rank >= 1 and one dtype");
  }
  tensorflow::TensorShape row = var.shape(), grad_row = grad.shape();
  row.RemoveDim(0);
  grad_row.RemoveDim(0);
  if (grad.dim_size(0) != indices.dim_size(0) || row != grad_row) {
    return InvalidArgument("the gradient " + grad.shape().DebugString() + " is not " +
                           std::to_string(indices.dim_size(0)) + " rows of the variable " +
                           var.shape().DebugString());
  }
  const size_t n = static_cast<size_t>(grad.dim_size(0));
  const size_t elems = n == 0 ? 0 : static_cast<size_t>(grad.NumElements()) / n;
  const int64_t num_rows = var.dim_size(0);
  const bool wide = indices.dtype() == tensorflow::DT_INT64;
  if (grad.dtype() == tensorflow::DT_FLOAT) {
    const float* v = grad.flat<float>().data();
    return wide ? MergeDuplicateRows(v, indices.flat<int64_t>().data(), n, elems, num_rows, out)
                : MergeDuplicateRows(v, indices.flat<int32_t>().data(), n, elems, num_rows, out);
  }
  const double* v = grad.flat<double>().data();
  return wide ? MergeDuplicateRows(v, indices.flat<int64_t>().data(), n, elems, num_rows, out)
              : MergeDuplicateRows(v, indices.flat<int32_t>().data(), n, elems, num_rows, out);
}

}  // namespace tfps

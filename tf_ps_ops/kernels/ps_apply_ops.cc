// PsApplyXXX: PS-mode replacements of TensorFlow's ResourceApplyXXX ops, with the same
// inputs and attrs (a graph rewrite is a 1:1 node swap) plus an optional `tensor_name`.
//
// The kernel pushes the gradient, the server averages the workers' gradients and applies
// the optimizer, and the kernel writes the returned parameter into the variable.
// Initialisation: PsInitVariable (or, failing that, the first PsApply of a variable) sends
// rank 0's value to the servers and every rank adopts the server's value, so replicas start
// equal. Run PsInitVariable before the first forward pass (tf_ps_ops.ps_mode.
// initialize_variables; the Keras PS optimizers do it in build()): a gradient computed
// before it, on a rank's own initial weights, would differ from rank 0's.
// The local slot variables (accum, m, v, ...) are only read for their initial value, which
// travels with each push: in PS mode the slots live on the servers.
//
// PsSparseApplyXXX (ResourceSparseApplyXXX's inputs: ..., grad rows, indices): duplicate
// indices are summed first (as TF's optimizers do before calling the op), only the touched
// rows travel, the servers update only rows some worker touched, and the kernel writes back
// the rows they answer. The sparse ops share this file's machinery (init, slots, specs).
#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tf_ps_ops/cc/engine/engine.h"
#include "tf_ps_ops/kernels/status_adapter.h"

namespace tfps {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::Var;

struct PsApplySpec {
  Optimizer optimizer;
  std::vector<const char*> slots;    // resource inputs, in the server's slot order
  std::vector<const char*> scalars;  // scalar inputs, in the wire's parameter order
  bool has_nesterov = false;         // attr use_nesterov follows the scalars
  bool has_update_slots = false;     // attr update_slots follows the scalars
  bool amsgrad = false;              // Adam only: appended as the last parameter
  bool zero_epsilon = false;         // Adagrad (v1) has no epsilon input
  const char* grad = "grad";
  bool sparse = false;               // PsSparseApply: grad holds rows, `indices` their ids
};

// A sparse gradient with unique, increasing row ids (what a sparse push sends), or the
// rows the servers answer.
struct SparseRows {
  std::vector<int64_t> ids;
  std::vector<char> values;  // ids.size() rows, back to back
};

// Sums the rows of duplicate indices (in the order they appear) and orders the rows by id.
template <typename T, typename Index>
Status UniqueRows(const Tensor& grad, const Tensor& indices, int64_t num_rows, size_t row,
                  SparseRows* out) {
  const auto idx = indices.flat<Index>();
  const T* values = reinterpret_cast<const T*>(grad.tensor_data().data());
  std::vector<int64_t> order(idx.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&idx](int64_t a, int64_t b) { return idx(a) < idx(b); });
  std::vector<T> rows;
  rows.reserve(order.size() * row);
  for (int64_t k : order) {
    const int64_t id = static_cast<int64_t>(idx(k));
    if (id < 0 || id >= num_rows) {
      return InvalidArgument("index " + std::to_string(id) + " is not in [0, " +
                             std::to_string(num_rows) + ")");
    }
    const T* src = values + k * row;
    if (out->ids.empty() || out->ids.back() != id) {
      out->ids.push_back(id);
      rows.insert(rows.end(), src, src + row);
    } else {
      T* dst = rows.data() + rows.size() - row;
      for (size_t j = 0; j < row; ++j) dst[j] += src[j];
    }
  }
  const char* bytes = reinterpret_cast<const char*>(rows.data());
  out->values.assign(bytes, bytes + rows.size() * sizeof(T));
  return Status::Ok();
}

Status ToUniqueRows(const Tensor& grad, const Tensor& indices, int64_t num_rows,
                    SparseRows* out) {
  const size_t row = grad.dims() == 0 || grad.dim_size(0) == 0
                         ? 0 : static_cast<size_t>(grad.NumElements() / grad.dim_size(0));
  const bool wide = indices.dtype() == tensorflow::DT_INT64;
  if (grad.dtype() == tensorflow::DT_FLOAT) {
    return wide ? UniqueRows<float, int64_t>(grad, indices, num_rows, row, out)
                : UniqueRows<float, int32_t>(grad, indices, num_rows, row, out);
  }
  return wide ? UniqueRows<double, int64_t>(grad, indices, num_rows, row, out)
              : UniqueRows<double, int32_t>(grad, indices, num_rows, row, out);
}

// Writes answered rows into the variable in place, under its lock; a buffer that readers
// still hold (or any, in copy-on-read mode) is copied first, as TF's own update ops do.
void StoreRows(Var* var, const SparseRows& rows) {
  tensorflow::mutex_lock lock(*var->mu());
  Tensor* t = var->tensor();
  if (var->copy_on_read_mode.load() || !t->RefCountIsOne()) {
    Tensor copy(t->dtype(), t->shape());
    std::memcpy(const_cast<char*>(copy.tensor_data().data()), t->tensor_data().data(),
                t->tensor_data().size());
    *t = copy;
  }
  if (rows.ids.empty()) return;
  char* base = const_cast<char*>(t->tensor_data().data());
  const size_t row_bytes = rows.values.size() / rows.ids.size();
  for (size_t i = 0; i < rows.ids.size(); ++i) {
    std::memcpy(base + rows.ids[i] * row_bytes, rows.values.data() + i * row_bytes, row_bytes);
  }
}

// Variables this process has initialised on the servers (by key name).
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

void FillRequest(const std::string& name, const Tensor& in, Tensor* out, PushPullRequest* r) {
  r->name = name;
  r->dtype = ToWireDType(in.dtype());
  for (int i = 0; i < in.dims(); ++i) r->dims.push_back(in.dim_size(i));
  r->count = static_cast<uint64_t>(in.NumElements());
  r->input = in.tensor_data().data();
  r->output = const_cast<char*>(out->tensor_data().data());
  r->input_holder = std::make_shared<Tensor>(in);
}

// Writes the server's answer into the variable: the new buffer replaces the old one under
// the variable's lock (no copy; readers holding the old buffer keep it).
void Store(Var* var, const Tensor& fresh) {
  tensorflow::mutex_lock lock(*var->mu());
  *var->tensor() = fresh;
  var->is_initialized = true;
}

// Sends rank 0's `value` of the variable to the servers (unless they hold it already, or
// with `overwrite` always: a restore) and writes the servers' value into `var`, then calls
// `then`. On failure the name is forgotten, so a retry initialises again. Keeps `var`
// referenced; `then` owns it after.
void InitVariable(OpKernelContext* ctx, Var* var, const std::string& name, const Tensor& value,
                  std::function<void(const Status&)> then, bool overwrite = false) {
  auto fresh = std::make_shared<Tensor>();
  if (!ctx->allocate_temp(value.dtype(), value.shape(), fresh.get()).ok()) {
    then(Internal("cannot allocate a buffer for the parameter '" + name + "'"));
    return;
  }
  PushPullRequest request;
  FillRequest(name, value, fresh.get(), &request);
  request.root_rank = 0;
  request.flags = kFlagPsInit | (overwrite ? kFlagPsOverwrite : 0);
  request.done = [var, name, fresh, then](const Status& s) {
    if (s.ok()) {
      Store(var, *fresh);
    } else {
      std::lock_guard<std::mutex> lock(g_initialised_mu);
      g_initialised.erase(name);
    }
    then(s);
  };
  Engine::Get().Enqueue(std::move(request));
}

class PsApplyOp : public AsyncOpKernel {
 public:
  PsApplyOp(OpKernelConstruction* ctx, PsApplySpec spec) : AsyncOpKernel(ctx), spec_(spec) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("tensor_name", &tensor_name_));
    if (spec_.has_nesterov) OP_REQUIRES_OK(ctx, ctx->GetAttr("use_nesterov", &nesterov_));
    if (spec_.has_update_slots) OP_REQUIRES_OK(ctx, ctx->GetAttr("update_slots", &update_slots_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    OP_REQUIRES_ASYNC(ctx, Engine::Get().initialized(),
                      absl::FailedPreconditionError("tf_ps_ops is not initialised: call "
                                                    "tf_ps_ops.init() before " + type_string()),
                      done);
    tensorflow::core::RefCountPtr<Var> var;
    OP_REQUIRES_OK_ASYNC(ctx, LookupResource(ctx, HandleFromInput(ctx, 0), &var), done);
    const std::string name =
        tensor_name_.empty() ? "ps:" + HandleFromInput(ctx, 0).name() : tensor_name_;
    const Tensor* grad = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->input(spec_.grad, &grad), done);
    std::vector<double> params;
    for (const char* scalar : spec_.scalars) {
      const Tensor* t = nullptr;
      OP_REQUIRES_OK_ASYNC(ctx, ctx->input(scalar, &t), done);
      OP_REQUIRES_ASYNC(ctx, tensorflow::TensorShapeUtils::IsScalar(t->shape()),
                        absl::InvalidArgumentError(std::string(scalar) + " must be a scalar"),
                        done);
      params.push_back(ScalarOf(*t));
    }
    // The rest of the wire's parameter order (wire/message.h, enum Optimizer).
    const Optimizer opt = spec_.optimizer;
    if (spec_.zero_epsilon) params.push_back(0.0);
    if (opt == Optimizer::kMomentum || opt == Optimizer::kKerasMomentum ||
        opt == Optimizer::kAdam) {
      params.push_back(nesterov_ ? 1.0 : 0.0);
    }
    if (spec_.has_update_slots) params.push_back(update_slots_ ? 1.0 : 0.0);
    if (opt == Optimizer::kAdam) params.push_back(spec_.amsgrad ? 1.0 : 0.0);
    // Then the slots' initial values, for the server to create its slots with.
    for (const char* slot : spec_.slots) params.push_back(SlotInitialValue(ctx, slot));
    while (params.size() < static_cast<size_t>(OptimizerParamCount(opt) + OptimizerSlotCount(opt))) {
      params.push_back(0.0);  // Adam's vhat when the op is not the AMSGrad one
    }

    Tensor value;
    {
      tensorflow::tf_shared_lock lock(*var->mu());
      OP_REQUIRES_ASYNC(ctx, var->is_initialized,
                        absl::FailedPreconditionError("variable '" + name +
                                                      "' is used before it is initialised"),
                        done);
      value = *var->tensor();
    }
    auto sparse = std::make_shared<SparseRows>();
    if (spec_.sparse) {
      const Tensor* indices = nullptr;
      OP_REQUIRES_OK_ASYNC(ctx, ctx->input("indices", &indices), done);
      Status s = CheckSparse(value, *grad, *indices);
      if (s.ok()) s = ToUniqueRows(*grad, *indices, value.dim_size(0), sparse.get());
      OP_REQUIRES_OK_ASYNC(ctx, ToTfStatus(s.WithPrefix(type_string() + " of '" + name + "': ")),
                           done);
    } else {
      OP_REQUIRES_ASYNC(ctx, value.shape() == grad->shape() && value.dtype() == grad->dtype(),
                        absl::InvalidArgumentError(
                            type_string() + " of '" + name + "': the gradient " +
                            grad->shape().DebugString() + " does not match the variable " +
                            value.shape().DebugString()),
                        done);
    }
    bool needs_init;
    {
      std::lock_guard<std::mutex> lock(g_initialised_mu);
      needs_init = g_initialised.insert(name).second;
    }
    Var* raw_var = var.release();  // owned by the callbacks from here on
    auto apply = [this, ctx, raw_var, name, params, sparse](const Tensor& grad_or_var,
                                                            DoneCallback done) {
      if (spec_.sparse) {
        ApplySparse(ctx, raw_var, name, grad_or_var, sparse, params, std::move(done));
      } else {
        Apply(ctx, raw_var, name, grad_or_var, params, std::move(done));
      }
    };
    // The sparse request takes the variable's shape and dtype (its rows come from `sparse`).
    const Tensor shape_source = spec_.sparse ? value : *grad;
    if (!needs_init) {
      apply(shape_source, std::move(done));
      return;
    }
    InitVariable(ctx, raw_var, name, value,
                 [ctx, raw_var, shape_source, apply, done](const Status& s) {
                   if (!s.ok()) {
                     raw_var->Unref();
                     ctx->SetStatus(ToTfStatus(s));
                     done();
                     return;
                   }
                   apply(shape_source, done);
                 });
  }

 private:
  double SlotInitialValue(OpKernelContext* ctx, const char* input_name) {
    int index = -1, stop = -1;
    if (!ctx->op_kernel().InputRange(input_name, &index, &stop).ok()) return 0.0;
    tensorflow::core::RefCountPtr<Var> slot;
    if (!LookupResource(ctx, HandleFromInput(ctx, index), &slot).ok()) return 0.0;
    tensorflow::tf_shared_lock lock(*slot->mu());
    return slot->is_initialized ? FirstElementOf(*slot->tensor()) : 0.0;
  }

  void Apply(OpKernelContext* ctx, Var* var, const std::string& name, const Tensor& grad,
             const std::vector<double>& params, DoneCallback done) const {
    auto fresh = std::make_shared<Tensor>();
    if (!ctx->allocate_temp(grad.dtype(), grad.shape(), fresh.get()).ok()) {
      var->Unref();
      ctx->SetStatus(absl::InternalError("cannot allocate the parameter buffer"));
      done();
      return;
    }
    PushPullRequest request;
    FillRequest(name, grad, fresh.get(), &request);
    request.flags = kFlagPsApply;
    request.optimizer = spec_.optimizer;
    request.params = params;
    request.done = [ctx, var, fresh, done](const Status& s) {
      if (s.ok()) Store(var, *fresh);
      var->Unref();
      ctx->SetStatus(ToTfStatus(s));
      done();
    };
    Engine::Get().Enqueue(std::move(request));
  }

  static Status CheckSparse(const Tensor& var, const Tensor& grad, const Tensor& indices) {
    if (!tensorflow::TensorShapeUtils::IsVector(indices.shape())) {
      return InvalidArgument("indices must be a vector, got " + indices.shape().DebugString());
    }
    tensorflow::TensorShape row = var.shape();
    if (var.dims() < 1 || grad.dims() < 1 || var.dtype() != grad.dtype()) {
      return InvalidArgument("the variable and the gradient need rank >= 1 and one dtype");
    }
    row.RemoveDim(0);
    tensorflow::TensorShape grad_row = grad.shape();
    grad_row.RemoveDim(0);
    if (grad.dim_size(0) != indices.dim_size(0) || row != grad_row) {
      return InvalidArgument("the gradient " + grad.shape().DebugString() + " is not " +
                             std::to_string(indices.dim_size(0)) + " rows of the variable " +
                             var.shape().DebugString());
    }
    return Status::Ok();
  }

  // Pushes the unique rows; the servers answer the rows any worker touched, written into
  // the variable under its lock once every partition has answered.
  void ApplySparse(OpKernelContext* ctx, Var* var, const std::string& name, const Tensor& value,
                   std::shared_ptr<SparseRows> rows, const std::vector<double>& params,
                   DoneCallback done) const {
    auto answered = std::make_shared<SparseRows>();
    const size_t row_bytes = value.dims() == 0 || value.dim_size(0) == 0
        ? 0 : value.TotalBytes() / static_cast<size_t>(value.dim_size(0));
    PushPullRequest request;
    request.name = name;
    request.dtype = ToWireDType(value.dtype());
    for (int i = 0; i < value.dims(); ++i) request.dims.push_back(value.dim_size(i));
    request.count = static_cast<uint64_t>(value.NumElements());
    request.rows = rows->ids.data();
    request.num_rows = rows->ids.size();
    request.input = rows->values.data();
    request.input_holder = rows;
    request.flags = kFlagPsApply | kFlagSparse;
    request.optimizer = spec_.optimizer;
    request.params = params;
    request.on_rows = [answered, row_bytes](const int64_t* ids, uint64_t n, const void* v) {
      answered->ids.insert(answered->ids.end(), ids, ids + n);
      const char* bytes = static_cast<const char*>(v);
      answered->values.insert(answered->values.end(), bytes, bytes + n * row_bytes);
    };
    request.done = [ctx, var, answered, done](const Status& s) {
      if (s.ok()) StoreRows(var, *answered);
      var->Unref();
      ctx->SetStatus(ToTfStatus(s));
      done();
    };
    Engine::Get().Enqueue(std::move(request));
  }

  const PsApplySpec spec_;
  std::string tensor_name_;
  bool nesterov_ = false;
  bool update_slots_ = true;
};

// PsInitVariable: the initialisation alone, for before the first forward pass; with
// `overwrite`, rank 0's value replaces the servers' (ps_mode.push_variables, after a restore).
class PsInitVariableOp : public AsyncOpKernel {
 public:
  explicit PsInitVariableOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("overwrite", &overwrite_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    OP_REQUIRES_ASYNC(ctx, Engine::Get().initialized(),
                      absl::FailedPreconditionError("tf_ps_ops is not initialised: call "
                                                    "tf_ps_ops.init() before PsInitVariable"),
                      done);
    tensorflow::core::RefCountPtr<Var> var;
    OP_REQUIRES_OK_ASYNC(ctx, LookupResource(ctx, HandleFromInput(ctx, 0), &var), done);
    const std::string name =
        tensor_name_.empty() ? "ps:" + HandleFromInput(ctx, 0).name() : tensor_name_;
    Tensor value;
    {
      tensorflow::tf_shared_lock lock(*var->mu());
      OP_REQUIRES_ASYNC(ctx, var->is_initialized,
                        absl::FailedPreconditionError("variable '" + name +
                                                      "' must hold its initial value first"),
                        done);
      value = *var->tensor();
    }
    {
      std::lock_guard<std::mutex> lock(g_initialised_mu);
      g_initialised.insert(name);  // later PsApply calls skip their own initialisation
    }
    Var* raw_var = var.release();
    InitVariable(ctx, raw_var, name, value, [ctx, raw_var, done](const Status& s) {
      raw_var->Unref();
      ctx->SetStatus(ToTfStatus(s));
      done();
    }, overwrite_);
  }

 private:
  std::string tensor_name_;
  bool overwrite_ = false;
};

REGISTER_KERNEL_BUILDER(Name("PsInitVariable").Device(tensorflow::DEVICE_CPU), PsInitVariableOp);

#define TFPS_PS_KERNEL(OP, ...)                                                       \
  class OP##Kernel : public PsApplyOp {                                               \
   public:                                                                            \
    explicit OP##Kernel(OpKernelConstruction* ctx) : PsApplyOp(ctx, __VA_ARGS__) {}   \
  };                                                                                  \
  REGISTER_KERNEL_BUILDER(Name(#OP).Device(tensorflow::DEVICE_CPU), OP##Kernel)

PsApplySpec Spec(Optimizer opt, std::vector<const char*> slots, std::vector<const char*> scalars) {
  PsApplySpec s{opt, std::move(slots), std::move(scalars)};
  return s;
}

PsApplySpec WithNesterov(PsApplySpec s) { s.has_nesterov = true; return s; }
PsApplySpec WithUpdateSlots(PsApplySpec s) { s.has_update_slots = true; return s; }
PsApplySpec WithAmsgrad(PsApplySpec s) { s.amsgrad = true; return s; }
PsApplySpec WithZeroEpsilon(PsApplySpec s) { s.zero_epsilon = true; return s; }
PsApplySpec WithGrad(PsApplySpec s, const char* grad) { s.grad = grad; return s; }
PsApplySpec Sparse(PsApplySpec s) { s.sparse = true; return s; }

TFPS_PS_KERNEL(PsApplyGradientDescent,
               WithGrad(Spec(Optimizer::kGradientDescent, {}, {"alpha"}), "delta"));
TFPS_PS_KERNEL(PsApplyMomentum,
               WithNesterov(Spec(Optimizer::kMomentum, {"accum"}, {"lr", "momentum"})));
TFPS_PS_KERNEL(PsApplyKerasMomentum,
               WithNesterov(Spec(Optimizer::kKerasMomentum, {"accum"}, {"lr", "momentum"})));
TFPS_PS_KERNEL(PsApplyAdam,
               WithNesterov(Spec(Optimizer::kAdam, {"m", "v"},
                                 {"lr", "beta1", "beta2", "epsilon", "beta1_power",
                                  "beta2_power"})));
TFPS_PS_KERNEL(PsApplyAdamWithAmsgrad,
               WithAmsgrad(Spec(Optimizer::kAdam, {"m", "v", "vhat"},
                                {"lr", "beta1", "beta2", "epsilon", "beta1_power",
                                 "beta2_power"})));
TFPS_PS_KERNEL(PsApplyAdagrad,
               WithUpdateSlots(WithZeroEpsilon(Spec(Optimizer::kAdagrad, {"accum"}, {"lr"}))));
TFPS_PS_KERNEL(PsApplyAdagradV2,
               WithUpdateSlots(Spec(Optimizer::kAdagrad, {"accum"}, {"lr", "epsilon"})));
TFPS_PS_KERNEL(PsApplyKerasAdagrad,
               Spec(Optimizer::kKerasAdagrad, {"accum"}, {"lr", "epsilon"}));
TFPS_PS_KERNEL(PsApplyRMSProp,
               Spec(Optimizer::kRMSProp, {"ms", "mom"}, {"lr", "rho", "momentum", "epsilon"}));
TFPS_PS_KERNEL(PsApplyCenteredRMSProp,
               Spec(Optimizer::kCenteredRMSProp, {"mg", "ms", "mom"},
                    {"lr", "rho", "momentum", "epsilon"}));

TFPS_PS_KERNEL(PsSparseApplyGradientDescent,
               Sparse(Spec(Optimizer::kGradientDescent, {}, {"alpha"})));
TFPS_PS_KERNEL(PsSparseApplyMomentum,
               Sparse(WithNesterov(Spec(Optimizer::kMomentum, {"accum"}, {"lr", "momentum"}))));
TFPS_PS_KERNEL(PsSparseApplyKerasMomentum,
               Sparse(WithNesterov(Spec(Optimizer::kKerasMomentum, {"accum"},
                                        {"lr", "momentum"}))));
TFPS_PS_KERNEL(PsSparseApplyAdagrad,
               Sparse(WithUpdateSlots(WithZeroEpsilon(Spec(Optimizer::kAdagrad, {"accum"},
                                                           {"lr"})))));
TFPS_PS_KERNEL(PsSparseApplyAdagradV2,
               Sparse(WithUpdateSlots(Spec(Optimizer::kAdagrad, {"accum"}, {"lr", "epsilon"}))));
TFPS_PS_KERNEL(PsSparseApplyKerasAdagrad,
               Sparse(Spec(Optimizer::kKerasAdagrad, {"accum"}, {"lr", "epsilon"})));
TFPS_PS_KERNEL(PsSparseApplyRMSProp,
               Sparse(Spec(Optimizer::kRMSProp, {"ms", "mom"},
                           {"lr", "rho", "momentum", "epsilon"})));
TFPS_PS_KERNEL(PsSparseApplyCenteredRMSProp,
               Sparse(Spec(Optimizer::kCenteredRMSProp, {"mg", "ms", "mom"},
                           {"lr", "rho", "momentum", "epsilon"})));

}  // namespace
}  // namespace tfps

// Kernels of PsInitVariable, PsApplyXXX and PsSparseApplyXXX (ops in ps_apply_op_defs.cc):
// adapters from the TF op to a PS-mode push. The kernel pushes the gradient, the servers
// average the workers' gradients and apply the optimizer, and the kernel writes the
// returned parameter into the variable. What the push carries and how the variable is
// initialised and written: ps_variable.h; which op runs which optimizer: ps_op_table.cc.
//
// Run PsInitVariable before the first forward pass (tf_ps_ops.ps_mode.initialize_variables;
// the Keras PS optimizers do it in build()): a gradient computed before it, on a rank's own
// initial weights, would differ from rank 0's.
//
// Sparse ops (ResourceSparseApplyXXX's inputs: ..., grad rows, indices): duplicate indices
// are summed first (as TF's optimizers do before calling the op), only the touched rows
// travel, the servers update only rows some worker touched, and the kernel writes back the
// rows they answer.
#include <memory>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tf_ps_ops/kernels/ps_variable.h"
#include "tf_ps_ops/kernels/tf_adapter.h"

namespace tfps {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::Var;

// The variable's current value, or an error when it holds none yet.
absl::Status ReadValue(Var* var, const std::string& key, const std::string& missing,
                       Tensor* value) {
  tensorflow::tf_shared_lock lock(*var->mu());
  if (!var->is_initialized) {
    return absl::FailedPreconditionError("variable '" + key + "' " + missing);
  }
  *value = *var->tensor();
  return absl::OkStatus();
}

class PsApplyOp : public AsyncOpKernel {
 public:
  explicit PsApplyOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    spec_ = FindPsOp(type_string());
    OP_REQUIRES(ctx, spec_ != nullptr,
                absl::InternalError(type_string() + " is not in the PS op table"));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(ctx, marshal_.Init(ctx, *this, *spec_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(ctx, RequireInitialised(type_string()), done);
    tensorflow::core::RefCountPtr<Var> var;
    OP_REQUIRES_OK_ASYNC(ctx, LookupResource(ctx, HandleFromInput(ctx, 0), &var), done);
    const std::string key = PsKey(ctx, tensor_name_);
    const Tensor* grad = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->input(spec_->grad, &grad), done);
    std::vector<double> params;
    OP_REQUIRES_OK_ASYNC(ctx, marshal_.Collect(ctx, key, &params), done);
    Tensor value;
    OP_REQUIRES_OK_ASYNC(ctx, ReadValue(var.get(), key, "is used before it is initialised", &value),
                         done);
    auto rows = std::make_shared<SparseRows>();
    OP_REQUIRES_OK_ASYNC(ctx, CheckGradient(ctx, key, value, *grad, rows.get()), done);

    auto update = std::make_shared<Update>();
    update->key = key;
    update->params = std::move(params);
    update->rows = rows;
    // The sparse request takes the variable's shape and dtype (its rows come from `rows`).
    update->shape_source = spec_->sparse ? value : *grad;
    update->var = var.release();  // owned by the callbacks from here on
    if (!ClaimInitialisation(key)) {
      Push(ctx, update, std::move(done));
      return;
    }
    InitVariable(ctx, update->var, key, value, [this, ctx, update, done](const Status& s) {
      if (!s.ok()) {
        update->var->Unref();
        CompleteWithStatus(ctx, done)(s);
        return;
      }
      Push(ctx, update, done);
    }, /*overwrite=*/false);
  }

 private:
  // What one call pushes, shared by the callbacks; `var` is referenced until done.
  struct Update {
    Var* var = nullptr;
    std::string key;
    std::vector<double> params;
    std::shared_ptr<SparseRows> rows;
    Tensor shape_source;
  };

  void Push(OpKernelContext* ctx, std::shared_ptr<Update> u, DoneCallback done) const {
    PushPullRequest request;
    if (spec_->sparse) {
      request = SparseRequest(u->key, u->shape_source, u->rows, u->var);
    } else if (!DenseRequest(ctx, u->key, u->shape_source, u->var, &request)) {
      u->var->Unref();
      ctx->SetStatus(absl::InternalError("cannot allocate the parameter buffer"));
      done();
      return;
    }
    request.flags |= kFlagPsApply;
    request.optimizer = spec_->optimizer;
    request.params = u->params;
    auto store = request.done;
    request.done = [u, store, ctx, done](const Status& s) {
      if (s.ok()) store(s);  // writes the answer into the variable
      u->var->Unref();
      CompleteWithStatus(ctx, done)(s);
    };
    Engine::Get().Enqueue(std::move(request));
  }

  absl::Status CheckGradient(OpKernelContext* ctx, const std::string& key, const Tensor& value,
                             const Tensor& grad, SparseRows* rows) const {
    const std::string what = type_string() + " of '" + key + "': ";
    if (spec_->sparse) {
      const Tensor* indices = nullptr;
      TF_RETURN_IF_ERROR(ctx->input("indices", &indices));
      return ToTfStatus(ToUniqueRows(value, grad, *indices, rows).WithPrefix(what));
    }
    if (value.shape() == grad.shape() && value.dtype() == grad.dtype()) return absl::OkStatus();
    return absl::InvalidArgumentError(what + "the gradient " + grad.shape().DebugString() +
                                      " does not match the variable " +
                                      value.shape().DebugString());
  }

  // Pushes the gradient; the servers answer the whole parameter. `done` stores it. False
  // when there is no memory for the answer.
  static bool DenseRequest(OpKernelContext* ctx, const std::string& key, const Tensor& grad,
                           Var* var, PushPullRequest* request) {
    auto fresh = std::make_shared<Tensor>();
    if (!ctx->allocate_temp(grad.dtype(), grad.shape(), fresh.get()).ok()) return false;
    *request = RequestFor(key, grad, fresh.get());
    request->done = [var, fresh](const Status&) { StoreDense(var, *fresh); };
    return true;
  }

  // Pushes the unique rows; the servers answer the rows any worker touched, written into
  // the variable once every partition has answered.
  static PushPullRequest SparseRequest(const std::string& key, const Tensor& value,
                                       std::shared_ptr<SparseRows> rows, Var* var) {
    auto answered = std::make_shared<SparseRows>();
    const size_t row_bytes = value.dims() == 0 || value.dim_size(0) == 0
        ? 0 : value.TotalBytes() / static_cast<size_t>(value.dim_size(0));
    PushPullRequest request;
    DescribeInput(key, value, &request);
    request.rows = rows->ids.data();
    request.num_rows = rows->ids.size();
    request.input = rows->values.data();
    request.input_holder = rows;
    request.flags = kFlagSparse;
    request.on_rows = [answered, row_bytes](const int64_t* ids, uint64_t n, const void* v) {
      answered->ids.insert(answered->ids.end(), ids, ids + n);
      const char* bytes = static_cast<const char*>(v);
      answered->values.insert(answered->values.end(), bytes, bytes + n * row_bytes);
    };
    request.done = [var, answered](const Status&) { StoreRows(var, *answered); };
    return request;
  }

  const PsOpSpec* spec_ = nullptr;
  PsMarshal marshal_;
  std::string tensor_name_;
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
    OP_REQUIRES_OK_ASYNC(ctx, RequireInitialised("PsInitVariable"), done);
    tensorflow::core::RefCountPtr<Var> var;
    OP_REQUIRES_OK_ASYNC(ctx, LookupResource(ctx, HandleFromInput(ctx, 0), &var), done);
    const std::string key = PsKey(ctx, tensor_name_);
    Tensor value;
    OP_REQUIRES_OK_ASYNC(
        ctx, ReadValue(var.get(), key, "must hold its initial value first", &value), done);
    MarkInitialised(key);  // later PsApply calls skip their own initialisation
    Var* raw_var = var.release();
    InitVariable(ctx, raw_var, key, value, [ctx, raw_var, done](const Status& s) {
      raw_var->Unref();
      CompleteWithStatus(ctx, done)(s);
    }, overwrite_);
  }

 private:
  std::string tensor_name_;
  bool overwrite_ = false;
};

REGISTER_KERNEL_BUILDER(Name("PsInitVariable").Device(tensorflow::DEVICE_CPU), PsInitVariableOp);

// One line per op of the table (ps_op_table.cc); the kernel finds its row by its op name.
#define TFPS_PS_KERNEL(OP) \
  REGISTER_KERNEL_BUILDER(Name(OP).Device(tensorflow::DEVICE_CPU), PsApplyOp)

TFPS_PS_KERNEL("PsApplyGradientDescent");
TFPS_PS_KERNEL("PsApplyMomentum");
TFPS_PS_KERNEL("PsApplyKerasMomentum");
TFPS_PS_KERNEL("PsApplyAdam");
TFPS_PS_KERNEL("PsApplyAdamWithAmsgrad");
TFPS_PS_KERNEL("PsApplyAdagrad");
TFPS_PS_KERNEL("PsApplyAdagradV2");
TFPS_PS_KERNEL("PsApplyKerasAdagrad");
TFPS_PS_KERNEL("PsApplyRMSProp");
TFPS_PS_KERNEL("PsApplyCenteredRMSProp");
TFPS_PS_KERNEL("PsSparseApplyGradientDescent");
TFPS_PS_KERNEL("PsSparseApplyMomentum");
TFPS_PS_KERNEL("PsSparseApplyKerasMomentum");
TFPS_PS_KERNEL("PsSparseApplyAdagrad");
TFPS_PS_KERNEL("PsSparseApplyAdagradV2");
TFPS_PS_KERNEL("PsSparseApplyKerasAdagrad");
TFPS_PS_KERNEL("PsSparseApplyRMSProp");
TFPS_PS_KERNEL("PsSparseApplyCenteredRMSProp");

}  // namespace
}  // namespace tfps

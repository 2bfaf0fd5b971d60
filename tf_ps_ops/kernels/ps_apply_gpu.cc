// PsInitVariable and the dense PsApplyXXX ops on DEVICE_GPU (CUDA builds): variables on the
// GPU in PS mode. The gradient is staged to pinned host memory (gpu_staging.h), pushed like
// the CPU kernel's (ps_apply_ops.cc), and the servers' new parameter is copied into a fresh
// GPU buffer that replaces the variable's (StoreDense: readers holding the old one keep it).
// Hyperparameters are scalar inputs in host memory (HostMemory below: TF copies a GPU
// scalar there itself); slots are read once for their initial value, one element, from the
// device. Sparse PS ops have no GPU kernel yet: keep embedding variables on the CPU
// (docs/gpu.md).
#include "tf_ps_ops/kernels/gpu_staging.h"

#if TFPS_WITH_CUDA

#include <map>
#include <memory>
#include <mutex>
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

absl::Status ReadValue(Var* var, const std::string& key, const std::string& missing,
                       Tensor* value) {
  tensorflow::tf_shared_lock lock(*var->mu());
  if (!var->is_initialized) {
    return absl::FailedPreconditionError("variable '" + key + "' " + missing);
  }
  *value = *var->tensor();
  return absl::OkStatus();
}

// One GPU PS call's state, shared by its callbacks. `var` is referenced until done.
struct GpuUpdate {
  Var* var = nullptr;
  std::string key;
  Tensor device_value;  // the variable's buffer when the call started (for initialisation)
  Tensor grad_host, value_host, answer_host, answer_device;
};

// Copies the servers' answer (answer_host) into a fresh GPU buffer, stores it in the
// variable and calls `then`.
void StoreFromHost(OpKernelContext* ctx, std::shared_ptr<GpuUpdate> u,
                   std::function<void(const absl::Status&)> then) {
  absl::Status s = ctx->allocate_temp(u->answer_host.dtype(), u->answer_host.shape(),
                                      &u->answer_device);
  if (!s.ok()) return then(s);
  CopyToDevice(ctx, u->answer_host, &u->answer_device, [u, then](const absl::Status& copied) {
    if (copied.ok()) StoreDense(u->var, u->answer_device);
    then(copied);
  });
}

// PS-mode initialisation from the GPU: rank 0's value (staged) goes to the servers unless
// they hold the parameter, and every rank stores the servers' value (ps_variable.h,
// InitVariable, whose CPU version writes host memory).
void InitFromDevice(OpKernelContext* ctx, std::shared_ptr<GpuUpdate> u, bool overwrite,
                    std::function<void(const absl::Status&)> then) {
  StageToHost(ctx, u->device_value, &u->value_host, [ctx, u, overwrite,
                                                     then](const absl::Status& s) {
    absl::Status st = s;
    if (st.ok()) st = AllocatePinned(ctx, u->value_host.dtype(), u->value_host.shape(),
                                     &u->answer_host);
    if (!st.ok()) {
      ForgetInitialisation(u->key);
      return then(st);
    }
    PushPullRequest request = RequestFor(u->key, u->value_host, &u->answer_host);
    request.root_rank = 0;
    request.flags = kFlagPsInit | (overwrite ? kFlagPsOverwrite : 0);
    request.done = [ctx, u, then](const Status& status) {
      if (!status.ok()) {
        ForgetInitialisation(u->key);
        return then(ToTfStatus(status));
      }
      StoreFromHost(ctx, u, then);
    };
    Engine::Get().Enqueue(std::move(request));
  });
}

class PsApplyGpuOp : public AsyncOpKernel {
 public:
  explicit PsApplyGpuOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    spec_ = FindPsOp(type_string());
    OP_REQUIRES(ctx, spec_ != nullptr && !spec_->sparse,
                absl::InternalError(type_string() + " has no GPU kernel"));
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
    OP_REQUIRES_OK_ASYNC(ctx, marshal_.Collect(ctx, key, &params, SlotReader(ctx, key)), done);
    auto u = std::make_shared<GpuUpdate>();
    u->key = key;
    OP_REQUIRES_OK_ASYNC(
        ctx, ReadValue(var.get(), key, "is used before it is initialised", &u->device_value),
        done);
    OP_REQUIRES_ASYNC(ctx, u->device_value.shape() == grad->shape() &&
                               u->device_value.dtype() == grad->dtype(),
                      absl::InvalidArgumentError(
                          type_string() + " of '" + key + "': the gradient " +
                          grad->shape().DebugString() + " does not match the variable " +
                          u->device_value.shape().DebugString()),
                      done);
    u->var = var.release();
    auto finish = [ctx, done, u](const absl::Status& s) {
      u->var->Unref();
      FinishAsync(ctx, done, s);
    };
    const bool initialise = ClaimInitialisation(key);
    StageToHost(ctx, *grad, &u->grad_host, [this, ctx, u, params, initialise,
                                            finish](const absl::Status& s) {
      if (!s.ok()) {
        if (initialise) ForgetInitialisation(u->key);
        return finish(s);
      }
      if (!initialise) return Push(ctx, u, params, finish);
      InitFromDevice(ctx, u, /*overwrite=*/false, [this, ctx, u, params,
                                                   finish](const absl::Status& st) {
        if (!st.ok()) return finish(st);
        Push(ctx, u, params, finish);
      });
    });
  }

 private:
  void Push(OpKernelContext* ctx, std::shared_ptr<GpuUpdate> u, std::vector<double> params,
            std::function<void(const absl::Status&)> finish) const {
    absl::Status s = AllocatePinned(ctx, u->grad_host.dtype(), u->grad_host.shape(),
                                    &u->answer_host);
    if (!s.ok()) return finish(s);
    PushPullRequest request = RequestFor(u->key, u->grad_host, &u->answer_host);
    request.flags |= kFlagPsApply;
    request.optimizer = spec_->optimizer;
    request.params = std::move(params);
    request.done = [ctx, u, finish](const Status& status) {
      if (!status.ok()) return finish(ToTfStatus(status));
      StoreFromHost(ctx, u, finish);
    };
    Engine::Get().Enqueue(std::move(request));
  }

  // A slot's first element, copied from the GPU once per variable and slot (only the
  // initial value matters: the servers hold the slots).
  PsMarshal::SlotReader SlotReader(OpKernelContext* ctx, const std::string& key) {
    return [this, ctx, key](const std::string& slot, const Tensor& value, double* out) {
      std::lock_guard<std::mutex> lock(slots_mu_);
      auto found = slot_values_.find(key + "/" + slot);
      if (found != slot_values_.end()) {
        *out = found->second;
        return absl::OkStatus();
      }
      *out = 0.0;
      if (value.NumElements() > 0) {
        Tensor flat;
        if (!flat.CopyFrom(value, tensorflow::TensorShape({value.NumElements()}))) {
          return absl::InternalError("slot '" + slot + "' of '" + key + "': cannot view it");
        }
        Tensor host;
        TF_RETURN_IF_ERROR(StageToHostSync(ctx, flat.Slice(0, 1), &host));
        *out = value.dtype() == tensorflow::DT_FLOAT ? static_cast<double>(host.flat<float>()(0))
                                                     : host.flat<double>()(0);
      }
      slot_values_[key + "/" + slot] = *out;
      return absl::OkStatus();
    };
  }

  const PsOpSpec* spec_ = nullptr;
  PsMarshal marshal_;
  std::string tensor_name_;
  std::mutex slots_mu_;
  std::map<std::string, double> slot_values_;
};

class PsInitVariableGpuOp : public AsyncOpKernel {
 public:
  explicit PsInitVariableGpuOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("overwrite", &overwrite_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(ctx, RequireInitialised("PsInitVariable"), done);
    tensorflow::core::RefCountPtr<Var> var;
    OP_REQUIRES_OK_ASYNC(ctx, LookupResource(ctx, HandleFromInput(ctx, 0), &var), done);
    auto u = std::make_shared<GpuUpdate>();
    u->key = PsKey(ctx, tensor_name_);
    OP_REQUIRES_OK_ASYNC(
        ctx, ReadValue(var.get(), u->key, "must hold its initial value first", &u->device_value),
        done);
    MarkInitialised(u->key);
    u->var = var.release();
    InitFromDevice(ctx, u, overwrite_, [ctx, done, u](const absl::Status& s) {
      u->var->Unref();
      FinishAsync(ctx, done, s);
    });
  }

 private:
  std::string tensor_name_;
  bool overwrite_ = false;
};

// Resources live in host memory anyway; the scalar hyperparameters are asked there too.
REGISTER_KERNEL_BUILDER(Name("PsInitVariable").Device(tensorflow::DEVICE_GPU),
                        PsInitVariableGpuOp);
#define TFPS_PS_GPU_KERNEL(OP, ...)                                                        \
  REGISTER_KERNEL_BUILDER(Name(OP).Device(tensorflow::DEVICE_GPU) __VA_ARGS__, PsApplyGpuOp)

TFPS_PS_GPU_KERNEL("PsApplyGradientDescent", .HostMemory("alpha"));
TFPS_PS_GPU_KERNEL("PsApplyMomentum", .HostMemory("lr").HostMemory("momentum"));
TFPS_PS_GPU_KERNEL("PsApplyKerasMomentum", .HostMemory("lr").HostMemory("momentum"));
TFPS_PS_GPU_KERNEL("PsApplyAdam", .HostMemory("beta1_power").HostMemory("beta2_power")
                                      .HostMemory("lr").HostMemory("beta1").HostMemory("beta2")
                                      .HostMemory("epsilon"));
TFPS_PS_GPU_KERNEL("PsApplyAdamWithAmsgrad",
                   .HostMemory("beta1_power").HostMemory("beta2_power").HostMemory("lr")
                       .HostMemory("beta1").HostMemory("beta2").HostMemory("epsilon"));
TFPS_PS_GPU_KERNEL("PsApplyAdagrad", .HostMemory("lr"));
TFPS_PS_GPU_KERNEL("PsApplyAdagradV2", .HostMemory("lr").HostMemory("epsilon"));
TFPS_PS_GPU_KERNEL("PsApplyKerasAdagrad", .HostMemory("lr").HostMemory("epsilon"));
TFPS_PS_GPU_KERNEL("PsApplyRMSProp", .HostMemory("lr").HostMemory("rho")
                                         .HostMemory("momentum").HostMemory("epsilon"));
TFPS_PS_GPU_KERNEL("PsApplyCenteredRMSProp", .HostMemory("lr").HostMemory("rho")
                                                 .HostMemory("momentum").HostMemory("epsilon"));

// The sparse ops (PsSparseApplyXXX) have no GPU kernel: embedding tables stay on the CPU,
// where their rows are gathered and updated anyway (docs/gpu.md says why). Without any GPU
// registration, a table created on the GPU would fail in TensorFlow's placer with a message
// about kernels and colocation; this one, chosen for exactly that case (the resource input
// pins the op to the table's device), fails when it is created, saying what to do.
class PsSparseOnGpuOp : public tensorflow::OpKernel {
 public:
  explicit PsSparseOnGpuOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    std::string tensor_name;
    if (!ctx->GetAttr("tensor_name", &tensor_name).ok() || tensor_name.empty()) {
      tensor_name = name();
    }
    ctx->CtxFailure(absl::FailedPreconditionError(
        type_string() + " of '" + tensor_name + "': the variable is on " +
        ctx->device()->name() + ", and sparse PS updates run on the CPU only: keep embedding "
        "variables on the CPU (create them under tf.device('/CPU:0'); the rest of the model "
        "may stay on the GPU; docs/gpu.md)"));
  }
  void Compute(OpKernelContext* ctx) override {}
};

#define TFPS_PS_SPARSE_GPU_REFUSAL(OP) \
  REGISTER_KERNEL_BUILDER(Name(OP).Device(tensorflow::DEVICE_GPU), PsSparseOnGpuOp)

TFPS_PS_SPARSE_GPU_REFUSAL("PsSparseApplyGradientDescent");
TFPS_PS_SPARSE_GPU_REFUSAL("PsSparseApplyMomentum");
TFPS_PS_SPARSE_GPU_REFUSAL("PsSparseApplyKerasMomentum");
TFPS_PS_SPARSE_GPU_REFUSAL("PsSparseApplyAdagrad");
TFPS_PS_SPARSE_GPU_REFUSAL("PsSparseApplyAdagradV2");
TFPS_PS_SPARSE_GPU_REFUSAL("PsSparseApplyKerasAdagrad");
TFPS_PS_SPARSE_GPU_REFUSAL("PsSparseApplyRMSProp");
TFPS_PS_SPARSE_GPU_REFUSAL("PsSparseApplyCenteredRMSProp");

}  // namespace
}  // namespace tfps

#endif  // TFPS_WITH_CUDA

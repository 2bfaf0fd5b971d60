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
//
// One kernel per op for both devices (staging.h). On a GPU (CUDA builds; dense ops and
// PsInitVariable) the gradient, and to initialise the value, are staged to pinned host
// memory, and the servers' new parameter is copied into a fresh GPU buffer that replaces
// the variable's (StoreDense: readers holding the old one keep it). Hyperparameters are
// scalar inputs in host memory (HostMemory below: TF copies a GPU scalar there itself);
// slots are read once for their initial value, one element, from the device. Sparse PS ops
// refuse the GPU: keep embedding variables on the CPU (docs/gpu.md).
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tf_ps_ops/kernels/ps_variable.h"
#include "tf_ps_ops/kernels/staging.h"
#include "tf_ps_ops/kernels/tf_adapter.h"

namespace tfps {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::Var;

// One call's state, shared by its callbacks. `var` is referenced until done.
struct Update {
  Var* var = nullptr;
  std::string key;
  std::vector<double> params;
  Tensor value;       // the variable's value when the call started, on its device
  Tensor grad_host;   // the gradient in host memory
  Tensor value_host;  // `value` in host memory, to initialise
  Tensor answer;      // the servers' answer, in host memory
  Tensor answer_device;
  std::shared_ptr<SparseRows> rows = std::make_shared<SparseRows>();  // a sparse gradient's
};

// A failed host allocation: the CPU kernels have always said so in words of their own; the
// GPU kernels hand TF's status on.
template <typename Staging>
absl::Status AllocationFailure(const absl::Status& s, const std::string& cpu_message) {
  return Staging::kCopies ? s : absl::InternalError(cpu_message);
}

// The servers' answer (u->answer) into a fresh buffer on the variable's device, which
// replaces the variable's; then `then`.
template <typename Staging>
void StoreAnswer(OpKernelContext* ctx, std::shared_ptr<Update> u, StatusCallback then) {
  Staging::ToNewDevice(ctx, u->answer, &u->answer_device, [u, then](const absl::Status& s) {
    if (s.ok()) StoreDense(u->var, u->answer_device);
    then(s);
  });
}

// PS-mode initialisation: rank 0's value (u->value) goes to the servers unless they hold
// the parameter (or, with `overwrite`, always: a restore), and every rank stores the
// servers' value, then `then`. On failure the key is forgotten, so a retry initialises again.
template <typename Staging>
void InitVariable(OpKernelContext* ctx, std::shared_ptr<Update> u, bool overwrite,
                  StatusCallback then, int slot = -2) {
  Staging::ToHost(ctx, u->value, &u->value_host, [ctx, u, overwrite, then,
                                                  slot](const absl::Status& staged) {
    absl::Status s = staged;
    if (s.ok()) {
      s = Staging::AllocateHost(ctx, u->value_host.dtype(), u->value_host.shape(), &u->answer);
    }
    if (!s.ok()) {
      if (slot == -2) ForgetInitialisation(u->key);
      return then(AllocationFailure<Staging>(
          s, "cannot allocate a buffer for the parameter '" + u->key + "'"));
    }
    PushPullRequest request = RequestFor(u->key, u->value_host, &u->answer);
    request.root_rank = 0;
    request.flags = kFlagPsInit | (overwrite ? kFlagPsOverwrite : 0);
    if (slot >= -1) {  // the parameter's slots (wire/message.h, kFlagPsSlot)
      request.flags |= kFlagPsSlot;
      request.params = {static_cast<double>(slot)};
    }
    request.done = [ctx, u, then, slot](const Status& status) {
      if (!status.ok()) {
        if (slot == -2) ForgetInitialisation(u->key);
        return then(ToTfStatus(status));
      }
      StoreAnswer<Staging>(ctx, u, then);
    };
    Engine::Get().Enqueue(std::move(request));
  });
}

// A PsApply kernel's copies of slots' first elements, by variable and slot.
struct SlotCache {
  std::mutex mu;
  std::map<std::string, double> values;
};

// How a kernel reads a slot's first element (its initial value, which is all the servers
// use: they hold the slots). The CPU reads it at each call (PsMarshal's default).
template <typename Staging>
PsMarshal::SlotReader ReadSlots(OpKernelContext* ctx, const std::string& key, SlotCache* cache) {
  return nullptr;
}

#if TFPS_WITH_CUDA
// The GPU copies it from the device once per kernel, variable and slot.
template <>
PsMarshal::SlotReader ReadSlots<GpuStaging>(OpKernelContext* ctx, const std::string& key,
                                            SlotCache* cache) {
  return [ctx, key, cache](const std::string& slot, const Tensor& value, double* out) {
    std::lock_guard<std::mutex> lock(cache->mu);
    auto found = cache->values.find(key + "/" + slot);
    if (found != cache->values.end()) {
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
    cache->values[key + "/" + slot] = *out;
    return absl::OkStatus();
  };
}
#endif  // TFPS_WITH_CUDA

template <typename Staging>
class PsApplyOp : public AsyncOpKernel {
 public:
  explicit PsApplyOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    spec_ = FindPsOp(type_string());
    OP_REQUIRES(ctx, spec_ != nullptr && !(Staging::kCopies && spec_->sparse),
                absl::InternalError(type_string() + (Staging::kCopies
                                                         ? " has no GPU kernel"
                                                         : " is not in the PS op table")));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(ctx, marshal_.Init(ctx, *this, *spec_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(ctx, RequireInitialised(type_string()), done);
    tensorflow::core::RefCountPtr<Var> var;
    OP_REQUIRES_OK_ASYNC(ctx, LookupResource(ctx, HandleFromInput(ctx, 0), &var), done);
    auto u = std::make_shared<Update>();
    u->key = PsKey(ctx, tensor_name_);
    const Tensor* grad = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->input(spec_->grad, &grad), done);
    OP_REQUIRES_OK_ASYNC(
        ctx, marshal_.Collect(ctx, u->key, &u->params, ReadSlots<Staging>(ctx, u->key, &slots_)),
        done);
    OP_REQUIRES_OK_ASYNC(
        ctx, ReadValue(var.get(), u->key, "is used before it is initialised", &u->value), done);
    OP_REQUIRES_OK_ASYNC(ctx, CheckGradient(ctx, u->key, u->value, *grad, u->rows.get()), done);
    u->var = var.release();  // owned by the callbacks from here on
    Start(ctx, u, *grad, done);
  }

 private:
  // Stages the gradient, initialises the variable on the servers if this process has yet
  // to, and pushes.
  void Start(OpKernelContext* ctx, std::shared_ptr<Update> u, const Tensor& grad,
             DoneCallback done) const {
    StatusCallback finish = [ctx, done, u](const absl::Status& s) {
      u->var->Unref();
      FinishAsync(ctx, done, s);
    };
    const bool initialise = ClaimInitialisation(u->key);
    Staging::ToHost(ctx, grad, &u->grad_host, [this, ctx, u, initialise,
                                               finish](const absl::Status& s) {
      if (!s.ok()) {
        if (initialise) ForgetInitialisation(u->key);
        return finish(s);
      }
      if (!initialise) return Push(ctx, u, finish);
      InitVariable<Staging>(ctx, u, /*overwrite=*/false, [this, ctx, u,
                                                          finish](const absl::Status& st) {
        if (!st.ok()) return finish(st);
        Push(ctx, u, finish);
      });
    });
  }

  // Pushes the gradient; the servers answer the whole parameter (dense), or the rows any
  // worker touched (sparse), which go into the variable before `finish`.
  void Push(OpKernelContext* ctx, std::shared_ptr<Update> u, StatusCallback finish) const {
    PushPullRequest request;
    if (spec_->sparse) {
      request = SparseRequest(u->key, u->value, u->rows, u->var);
    } else {
      const absl::Status s = Staging::AllocateHost(ctx, u->grad_host.dtype(),
                                                   u->grad_host.shape(), &u->answer);
      if (!s.ok()) {
        return finish(AllocationFailure<Staging>(s, "cannot allocate the parameter buffer"));
      }
      request = RequestFor(u->key, u->grad_host, &u->answer);
    }
    request.flags |= kFlagPsApply;
    request.optimizer = spec_->optimizer;
    request.params = u->params;
    auto store_rows = request.done;  // sparse: writes the answered rows; dense: none
    request.done = [ctx, u, finish, store_rows](const Status& status) {
      if (!status.ok()) return finish(ToTfStatus(status));
      if (!store_rows) return StoreAnswer<Staging>(ctx, u, finish);
      store_rows(status);
      finish(absl::OkStatus());
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
  SlotCache slots_;  // GPU kernels only
};

// PsInitVariable: the initialisation alone, for before the first forward pass; with
// `overwrite`, rank 0's value replaces the servers' (ps_mode.push_variables, after a restore).
template <typename Staging>
class PsInitVariableOp : public AsyncOpKernel {
 public:
  explicit PsInitVariableOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("overwrite", &overwrite_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("slot", &slot_));
    OP_REQUIRES(ctx, slot_ >= -2,
                tensorflow::errors::InvalidArgument("PsInitVariable: slot ", slot_,
                                                    " is not -2 (none), -1 or a slot index"));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(ctx, RequireInitialised("PsInitVariable"), done);
    tensorflow::core::RefCountPtr<Var> var;
    OP_REQUIRES_OK_ASYNC(ctx, LookupResource(ctx, HandleFromInput(ctx, 0), &var), done);
    auto u = std::make_shared<Update>();
    u->key = PsKey(ctx, tensor_name_);
    OP_REQUIRES_OK_ASYNC(
        ctx, ReadValue(var.get(), u->key, "must hold its initial value first", &u->value), done);
    if (slot_ == -2) MarkInitialised(u->key);  // later PsApply calls skip their own init
    u->var = var.release();
    InitVariable<Staging>(ctx, u, overwrite_, [ctx, done, u](const absl::Status& s) {
      u->var->Unref();
      FinishAsync(ctx, done, s);
    }, slot_);
  }

 private:
  std::string tensor_name_;
  bool overwrite_ = false;
  int slot_ = -2;
};

REGISTER_KERNEL_BUILDER(Name("PsInitVariable").Device(tensorflow::DEVICE_CPU),
                        PsInitVariableOp<CpuStaging>);

// One line per op of the table (ps_op_table.cc); the kernel finds its row by its op name.
#define TFPS_PS_KERNEL(OP) \
  REGISTER_KERNEL_BUILDER(Name(OP).Device(tensorflow::DEVICE_CPU), PsApplyOp<CpuStaging>)

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

#if TFPS_WITH_CUDA
// Resources live in host memory anyway; the scalar hyperparameters are asked there too.
REGISTER_KERNEL_BUILDER(Name("PsInitVariable").Device(tensorflow::DEVICE_GPU),
                        PsInitVariableOp<GpuStaging>);
#define TFPS_PS_GPU_KERNEL(OP, ...)                                      \
  REGISTER_KERNEL_BUILDER(Name(OP).Device(tensorflow::DEVICE_GPU) __VA_ARGS__, \
                          PsApplyOp<GpuStaging>)

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

#endif  // TFPS_WITH_CUDA

}  // namespace
}  // namespace tfps

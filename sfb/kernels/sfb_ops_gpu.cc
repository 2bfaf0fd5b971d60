// SfbFactorGradient on DEVICE_GPU (CUDA builds). The factors u (K x M) and v (K x N) are
// packed into one message [u | v] on the GPU (two strided copies on the op's stream), staged
// to pinned host memory (tf_ps_ops/kernels/gpu_staging.h) and exchanged by the engine like
// the CPU op's; every worker's rows are then copied back to the GPU in rank order and
// G = sum v_p^T u_p is rebuilt there (tf_ps_ops/cc/gpu/sfb_rebuild.h), on the op's stream,
// bit-identical to the CPU rebuild: CPU and GPU replicas may train together.
#include "tf_ps_ops/kernels/gpu_staging.h"

#if TFPS_WITH_CUDA

#include <cuda_runtime.h>

#include <cstring>
#include <memory>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tf_ps_ops/cc/gpu/sfb_rebuild.h"
#include "tf_ps_ops/kernels/tf_adapter.h"

namespace tfps {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

absl::Status CudaToTf(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(what + ": " + cudaGetErrorString(err));
}

template <typename T>
class SfbFactorGradientGpuOp : public AsyncOpKernel {
 public:
  explicit SfbFactorGradientGpuOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("average", &average_));
    if (tensor_name_.empty()) tensor_name_ = name();
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& u = ctx->input(0);
    const Tensor& v = ctx->input(1);
    OP_REQUIRES_ASYNC(
        ctx, u.dims() == 2 && v.dims() == 2 && u.dim_size(0) == v.dim_size(0),
        absl::InvalidArgumentError("sufficient factors of '" + tensor_name_ +
                                   "' must be matrices with the same number of rows, got u " +
                                   u.shape().DebugString() + " and v " +
                                   v.shape().DebugString()),
        done);
    OP_REQUIRES_OK_ASYNC(
        ctx, RequireInitialised("the sufficient factor exchange of '" + tensor_name_ + "'"), done);
    const int64_t k = u.dim_size(0), m = u.dim_size(1), n = v.dim_size(1);
    void* stream = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ComputeStream(ctx, &stream), done);

    // Row i of the message is [u_i | v_i], as the CPU op sends it.
    // Held until the staging copy is done (the copy reads it on TF's device-to-host stream).
    auto message = std::make_shared<Tensor>();
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_temp(u.dtype(), TensorShape({k, m + n}), message.get()),
                         done);
    if (k > 0) {
      char* rows = const_cast<char*>(message->tensor_data().data());
      const size_t row = (m + n) * sizeof(T);
      cudaStream_t s = static_cast<cudaStream_t>(stream);
      if (m > 0) {
        OP_REQUIRES_OK_ASYNC(ctx, CudaToTf(cudaMemcpy2DAsync(rows, row, u.tensor_data().data(),
                                                             m * sizeof(T), m * sizeof(T), k,
                                                             cudaMemcpyDeviceToDevice, s),
                                           "packing u of '" + tensor_name_ + "'"),
                             done);
      }
      if (n > 0) {
        OP_REQUIRES_OK_ASYNC(ctx, CudaToTf(cudaMemcpy2DAsync(rows + m * sizeof(T), row,
                                                             v.tensor_data().data(),
                                                             n * sizeof(T), n * sizeof(T), k,
                                                             cudaMemcpyDeviceToDevice, s),
                                           "packing v of '" + tensor_name_ + "'"),
                             done);
      }
    }
    const T divisor = average_ ? static_cast<T>(Engine::Get().size()) : T(1);
    auto host = std::make_shared<Tensor>();
    StageToHost(ctx, *message, host.get(), [this, ctx, done, host, message, m, n, divisor,
                                            stream](const absl::Status& s) {
      if (!s.ok()) return FinishAsync(ctx, done, s);
      GatherRequest request;
      DescribeInput(tensor_name_, *host, &request);
      request.done = [ctx, done, m, n, divisor, stream](const Status& status,
                                                        const std::vector<PeerTensor>& parts) {
        if (!status.ok()) return FinishAsync(ctx, done, ToTfStatus(status));
        Gathered(ctx, done, m, n, divisor, stream, parts);
      };
      Engine::Get().EnqueueGather(std::move(request));
    });
  }

 private:
  // On the engine thread: the parts are copied into one pinned buffer (they live only
  // during this call), which goes to the GPU; the rebuild is queued once it is there.
  static void Gathered(OpKernelContext* ctx, DoneCallback done, int64_t m, int64_t n,
                       T divisor, void* stream, const std::vector<PeerTensor>& parts) {
    int64_t ktot = 0;
    for (const PeerTensor& p : parts) ktot += p.dims[0];
    const tensorflow::DataType dtype = tensorflow::DataTypeToEnum<T>::value;
    auto host = std::make_shared<Tensor>();
    auto rows = std::make_shared<Tensor>();
    absl::Status s = AllocatePinned(ctx, dtype, TensorShape({ktot, m + n}), host.get());
    if (s.ok()) s = ctx->allocate_temp(dtype, TensorShape({ktot, m + n}), rows.get());
    if (!s.ok()) return FinishAsync(ctx, done, s);
    char* dst = const_cast<char*>(host->tensor_data().data());
    for (const PeerTensor& p : parts) {  // rank order
      const size_t bytes = p.dims[0] * (m + n) * sizeof(T);
      if (bytes > 0) std::memcpy(dst, p.data, bytes);
      dst += bytes;
    }
    CopyToDevice(ctx, *host, rows.get(), [ctx, done, host, rows, ktot, m, n, divisor,
                                          stream](const absl::Status& copied) {
      if (!copied.ok()) return FinishAsync(ctx, done, copied);
      Tensor* output = nullptr;
      absl::Status st = ctx->allocate_output(0, TensorShape({n, m}), &output);
      if (st.ok()) {
        st = ToTfStatus(gpu::SfbRebuild(rows->flat<T>().data(), ktot, m, n, divisor,
                                        output->flat<T>().data(), stream));
      }
      // `rows` may be freed now: TF's GPU allocator hands its memory out again only to work
      // queued after the rebuild on the same stream.
      FinishAsync(ctx, done, st);
    });
  }

  std::string tensor_name_;
  bool average_ = true;
};

REGISTER_KERNEL_BUILDER(Name("SfbFactorGradient")
                            .Device(tensorflow::DEVICE_GPU)
                            .TypeConstraint<float>("T"),
                        SfbFactorGradientGpuOp<float>);
REGISTER_KERNEL_BUILDER(Name("SfbFactorGradient")
                            .Device(tensorflow::DEVICE_GPU)
                            .TypeConstraint<double>("T"),
                        SfbFactorGradientGpuOp<double>);

}  // namespace
}  // namespace tfps

#endif  // TFPS_WITH_CUDA

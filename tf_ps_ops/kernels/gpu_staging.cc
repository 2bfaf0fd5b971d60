// gpu_staging.h: staging through TensorFlow's device context.
#include "tf_ps_ops/kernels/gpu_staging.h"

#if TFPS_WITH_CUDA

#include "tensorflow/core/framework/device.h"
#include "tensorflow/core/framework/device_base.h"
#include "xla/stream_executor/stream.h"

namespace tfps {

using tensorflow::OpKernelContext;
using tensorflow::Tensor;

namespace {

tensorflow::Device* DeviceOf(OpKernelContext* ctx) {
  // Every device TF hands a kernel is a Device (DeviceBase is its interface for kernels).
  return static_cast<tensorflow::Device*>(ctx->device());
}

absl::Status NoContext(OpKernelContext* ctx) {
  return absl::InternalError(ctx->op_kernel().type_string() + " '" + ctx->op_kernel().name() +
                             "': no GPU device context (is the op placed on a GPU?)");
}

}  // namespace

absl::Status AllocatePinned(OpKernelContext* ctx, tensorflow::DataType dtype,
                            const tensorflow::TensorShape& shape, Tensor* host) {
  tensorflow::AllocatorAttributes attr;
  attr.set_on_host(true);
  attr.set_gpu_compatible(true);
  return ctx->allocate_temp(dtype, shape, host, attr);
}

void StageToHost(OpKernelContext* ctx, const Tensor& device, Tensor* host, StagedCallback then) {
  absl::Status s = AllocatePinned(ctx, device.dtype(), device.shape(), host);
  if (!s.ok()) return then(s);
  if (device.NumElements() == 0) return then(absl::OkStatus());
  tensorflow::DeviceContext* context = ctx->op_device_context();
  if (context == nullptr) return then(NoContext(ctx));
  context->CopyDeviceTensorToCPU(&device, ctx->op_kernel().name(), DeviceOf(ctx), host,
                                 std::move(then));
}

absl::Status StageToHostSync(OpKernelContext* ctx, const Tensor& device, Tensor* host) {
  TF_RETURN_IF_ERROR(AllocatePinned(ctx, device.dtype(), device.shape(), host));
  if (device.NumElements() == 0) return absl::OkStatus();
  tensorflow::DeviceContext* context = ctx->op_device_context();
  if (context == nullptr) return NoContext(ctx);
  return context->CopyDeviceTensorToCPUSync(&device, ctx->op_kernel().name(), DeviceOf(ctx),
                                            host);
}

void CopyToDevice(OpKernelContext* ctx, const Tensor& host, Tensor* device, StagedCallback then) {
  if (host.NumElements() == 0) return then(absl::OkStatus());
  tensorflow::DeviceContext* context = ctx->op_device_context();
  if (context == nullptr) return then(NoContext(ctx));
  context->CopyCPUTensorToDevice(&host, DeviceOf(ctx), device, std::move(then));
}

absl::Status ComputeStream(OpKernelContext* ctx, void** stream) {
  tensorflow::DeviceContext* context = ctx->op_device_context();
  if (context == nullptr || context->stream() == nullptr) return NoContext(ctx);
  *stream = context->stream()->platform_specific_handle().stream;
  if (*stream == nullptr) return NoContext(ctx);
  return absl::OkStatus();
}

absl::Status WhenStreamDone(OpKernelContext* ctx, std::function<void()> fn) {
  tensorflow::DeviceContext* context = ctx->op_device_context();
  if (context == nullptr || context->stream() == nullptr) return NoContext(ctx);
  return context->ThenExecute(DeviceOf(ctx), context->stream(), std::move(fn));
}

}  // namespace tfps

#endif  // TFPS_WITH_CUDA

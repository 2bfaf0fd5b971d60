// PsAllgather on DEVICE_GPU (CUDA builds): the tensor is staged to pinned host memory
// (gpu_staging.h), exchanged by the engine peer to peer, concatenated in a pinned buffer and
// copied into the GPU output.
#include "tf_ps_ops/kernels/gpu_staging.h"

#if TFPS_WITH_CUDA

#include <memory>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tf_ps_ops/kernels/comm_attrs.h"
#include "tf_ps_ops/kernels/tf_adapter.h"

namespace tfps {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

class PsAllgatherGpuOp : public AsyncOpKernel {
 public:
  explicit PsAllgatherGpuOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadTensorName(ctx, &tensor_name_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& input = ctx->input(0);
    OP_REQUIRES_OK_ASYNC(ctx, CheckGatherInput(tensor_name_, input), done);
    auto host = std::make_shared<Tensor>();
    StageToHost(ctx, input, host.get(), [this, ctx, done, host](const absl::Status& s) {
      if (!s.ok()) return FinishAsync(ctx, done, s);
      GatherRequest request;
      DescribeInput(tensor_name_, *host, &request);
      request.done = [ctx, done, shape = host->shape()](const Status& status,
                                                        const std::vector<PeerTensor>& parts) {
        if (!status.ok()) return FinishAsync(ctx, done, ToTfStatus(status));
        Gathered(ctx, done, shape, parts);
      };
      Engine::Get().EnqueueGather(std::move(request));
    });
  }

 private:
  // On the engine thread: the parts live only during this call, so they are concatenated
  // into a pinned buffer here and copied to the GPU from there.
  static void Gathered(OpKernelContext* ctx, DoneCallback done, TensorShape shape,
                       const std::vector<PeerTensor>& parts) {
    int64_t rows = 0;
    for (const PeerTensor& p : parts) rows += p.dims[0];
    shape.set_dim(0, rows);
    Tensor* output = nullptr;
    absl::Status s = ctx->allocate_output(0, shape, &output);
    auto host = std::make_shared<Tensor>();
    if (s.ok()) s = AllocatePinned(ctx, output->dtype(), shape, host.get());
    if (!s.ok()) return FinishAsync(ctx, done, s);
    ConcatenateRows(parts, rows, host.get());
    CopyToDevice(ctx, *host, output, [ctx, done, host](const absl::Status& copied) {
      FinishAsync(ctx, done, copied);
    });
  }

  std::string tensor_name_;
};

REGISTER_KERNEL_BUILDER(Name("PsAllgather").Device(tensorflow::DEVICE_GPU), PsAllgatherGpuOp);

}  // namespace
}  // namespace tfps

#endif  // TFPS_WITH_CUDA

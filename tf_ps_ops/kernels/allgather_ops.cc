// PsAllgather: every worker's tensor, concatenated along the first dimension in rank order,
// exchanged peer to peer (no server in the path). First dimensions may differ. On a GPU
// (CUDA builds) the tensor is staged to pinned host memory, exchanged, concatenated in a
// pinned buffer and copied into the GPU output (staging.h).
#include <memory>
#include <vector>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tf_ps_ops/kernels/comm_attrs.h"
#include "tf_ps_ops/kernels/staging.h"
#include "tf_ps_ops/kernels/tf_adapter.h"

namespace tfps {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

template <typename Staging>
class PsAllgatherOp : public AsyncOpKernel {
 public:
  explicit PsAllgatherOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadTensorName(ctx, &tensor_name_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& input = ctx->input(0);
    OP_REQUIRES_OK_ASYNC(ctx, CheckGatherInput(tensor_name_, input), done);
    auto host = std::make_shared<Tensor>();
    Staging::ToHost(ctx, input, host.get(), [this, ctx, done, host](const absl::Status& s) {
      if (!s.ok()) return FinishAsync(ctx, done, s);
      GatherRequest request;
      DescribeInput(tensor_name_, *host, &request);
      request.done = CompleteGather(
          ctx, done, [ctx, shape = host->shape()](const std::vector<PeerTensor>& parts,
                                                  const StatusCallback& finish) {
            Gathered(ctx, shape, parts, finish);
          });
      Engine::Get().EnqueueGather(std::move(request));
    });
  }

 private:
  // On the engine thread: the parts live only during this call, so they are concatenated
  // here, into the output (CPU) or a pinned buffer copied to it (GPU).
  static void Gathered(OpKernelContext* ctx, TensorShape shape,
                       const std::vector<PeerTensor>& parts, const StatusCallback& finish) {
    const int64_t rows = GatheredRows(parts);
    shape.set_dim(0, rows);
    Tensor* output = nullptr;
    absl::Status s = ctx->allocate_output(0, shape, &output);
    auto host = std::make_shared<Tensor>();
    if (s.ok()) s = Staging::HostFor(ctx, *output, host.get());
    if (!s.ok()) return finish(s);
    ConcatenateRows(parts, rows, host.get());
    Staging::ToDevice(ctx, *host, output, [finish, host](const absl::Status& copied) {
      finish(copied);
    });
  }

  std::string tensor_name_;
};

REGISTER_OP("PsAllgather")
    .Input("tensor: T")
    .Output("gathered: T")
    .Attr("T: {half, bfloat16, float, double, int8, uint8, int16, uint16, int32, int64, bool}")
    .Attr("tensor_name: string = ''")
    .SetIsStateful()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle out;
      TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(0), 0, c->UnknownDim(), &out));
      c->set_output(0, out);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Concatenates every worker's `tensor` along dimension 0, in rank order. Peer to peer.
The dtype and every dimension but the first must agree across workers.
)doc");

REGISTER_KERNEL_BUILDER(Name("PsAllgather").Device(tensorflow::DEVICE_CPU),
                        PsAllgatherOp<CpuStaging>);
#if TFPS_WITH_CUDA
REGISTER_KERNEL_BUILDER(Name("PsAllgather").Device(tensorflow::DEVICE_GPU),
                        PsAllgatherOp<GpuStaging>);
#endif

}  // namespace
}  // namespace tfps

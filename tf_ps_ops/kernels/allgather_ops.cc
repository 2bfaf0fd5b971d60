// PsAllgather: every worker's tensor, concatenated along the first dimension in rank order,
// exchanged peer to peer (no server in the path). First dimensions may differ.
#include <memory>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
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

class PsAllgatherOp : public AsyncOpKernel {
 public:
  explicit PsAllgatherOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ReadTensorName(ctx, &tensor_name_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& input = ctx->input(0);
    OP_REQUIRES_OK_ASYNC(ctx, CheckGatherInput(tensor_name_, input), done);
    GatherRequest request;
    DescribeInput(tensor_name_, input, &request);
    const TensorShape shape = input.shape();
    request.done = [ctx, done, shape](const Status& status,
                                            const std::vector<PeerTensor>& parts) {
      if (!status.ok()) {
        CompleteWithStatus(ctx, done)(status);
        return;
      }
      TensorShape out_shape = shape;
      int64_t rows = 0;
      for (const PeerTensor& p : parts) rows += p.dims[0];
      out_shape.set_dim(0, rows);
      Tensor* output = nullptr;
      OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, out_shape, &output), done);
      ConcatenateRows(parts, rows, output);
      done();
    };
    Engine::Get().EnqueueGather(std::move(request));
  }

 private:
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

REGISTER_KERNEL_BUILDER(Name("PsAllgather").Device(tensorflow::DEVICE_CPU), PsAllgatherOp);
// GPU kernel (CUDA builds): allgather_gpu.cc.

}  // namespace
}  // namespace tfps

// PsPushPull and PsBroadcast: asynchronous kernels that hand a tensor to the engine and
// return their thread; the engine calls back when every partition's answer is written.
#include <memory>
#include <optional>
#include <string>

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

constexpr char kCommTypes[] =
    "T: {half, bfloat16, float, double, int8, uint8, int16, uint16, int32, int64, bool}";

class PsCommOp : public AsyncOpKernel {
 public:
  explicit PsCommOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, attrs_.Read(ctx));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& input = ctx->input(0);
    OP_REQUIRES_OK_ASYNC(ctx, attrs_.Check(type_string()), done);
    // The answer may go into the input's own buffer when nothing else holds it (a gradient
    // usually): no fresh allocation to page in each step. Safe with zero-copy sends: a
    // partition's answer arrives only after the server has all of that partition, so
    // ZeroMQ is done reading it, and partitions do not overlap.
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(
        ctx, ctx->forward_input_or_allocate_output({0}, 0, input.shape(), &output), done);

    PushPullRequest request = attrs_.Request(input, output);
    request.done = CompleteWithStatus(ctx, done);
    Engine::Get().Enqueue(std::move(request));
  }

 private:
  CommAttrs attrs_;  // read as the GPU twin reads them (push_pull_gpu.cc)
};

REGISTER_OP("PsPushPull")
    .Input("tensor: T")
    .Input("handles: N * resource")
    .Output("sum: T")
    .Attr(kCommTypes)
    .Attr("tensor_name: string = ''")
    .Attr("N: int >= 0 = 0")
    .Attr("priority: int = 0")
    .Attr("compression: string = ''")
    .Attr("error_feedback: int = -1")
    .Attr("reduce_op: {'sum', 'min', 'max', 'product'} = 'sum'")
    .Attr("process_set: list(int) = []")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::UnchangedShape)
    .Doc(R"doc(
Sums `tensor` over every worker through the parameter servers (or, with `reduce_op`, takes
their elementwise min, max or product; bools: sum and max are or, min and product and).

Every worker's n-th call under the same `tensor_name` is summed with the others' n-th call.
Shapes and dtypes must agree across workers (InvalidArgument otherwise).
handles: optional: the variable the tensor is a gradient of. In a tf.function, stateful
  ops without a resource input run one after another in program order; with one they are
  ordered only against that variable, so gradients communicate while backward goes on.
priority: smaller is sent first when partitions wait for credit (layers nearer the input).
compression: a codec for float32 tensors (none, fp16, bf16, int8, onebit, topk:R,
  randomk:R; docs/compression.md); empty: the job default, TFPS_COMPRESSION. Other dtypes
  travel as they are.
process_set: the ranks of a Horovod process set, strictly increasing (this worker among
  them): the round completes when they have pushed. Empty: every worker.
error_feedback: onebit/topk/randomk keep what was not sent for the next call: 1 yes, 0 no,
  -1 as TFPS_ERROR_FEEDBACK says.
)doc");

REGISTER_OP("PsBroadcast")
    .Input("tensor: T")
    .Output("out: T")
    .Attr(kCommTypes)
    .Attr("tensor_name: string = ''")
    .Attr("root_rank: int")
    .Attr("process_set: list(int) = []")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::UnchangedShape)
    .Doc(R"doc(
Returns root_rank's `tensor` on every worker; only the root's bytes travel.
)doc");

REGISTER_KERNEL_BUILDER(Name("PsPushPull").Device(tensorflow::DEVICE_CPU), PsCommOp);
REGISTER_KERNEL_BUILDER(Name("PsBroadcast").Device(tensorflow::DEVICE_CPU), PsCommOp);
// GPU kernels (CUDA builds): push_pull_gpu.cc.

}  // namespace
}  // namespace tfps

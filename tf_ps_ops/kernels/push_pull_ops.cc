// PsPushPull and PsBroadcast: asynchronous kernels that hand a tensor to the engine and
// return their thread; the engine calls back when every partition's answer is written.
#include <memory>
#include <optional>
#include <string>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tf_ps_ops/kernels/tf_adapter.h"

namespace tfps {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;

constexpr char kCommTypes[] =
    "T: {half, bfloat16, float, double, int8, uint8, int16, uint16, int32, int64, bool}";

Status ParseReduceOp(const std::string& name, ReduceOp* op) {
  for (uint8_t v = 0; v <= kMaxReduceOp; ++v) {
    if (name == ReduceOpName(static_cast<ReduceOp>(v))) {
      *op = static_cast<ReduceOp>(v);
      return Status::Ok();
    }
  }
  return InvalidArgument("unknown reduce_op '" + name + "'");
}

class PsCommOp : public AsyncOpKernel {
 public:
  explicit PsCommOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("tensor_name", &tensor_name_));
    if (tensor_name_.empty()) tensor_name_ = name();
    if (ctx->HasAttr("root_rank")) OP_REQUIRES_OK(ctx, ctx->GetAttr("root_rank", &root_rank_));
    if (ctx->HasAttr("priority")) OP_REQUIRES_OK(ctx, ctx->GetAttr("priority", &priority_));
    if (ctx->HasAttr("process_set")) {
      OP_REQUIRES_OK(ctx, ctx->GetAttr("process_set", &process_set_));
    }
    if (ctx->HasAttr("reduce_op")) {
      std::string reduce_op;
      OP_REQUIRES_OK(ctx, ctx->GetAttr("reduce_op", &reduce_op));
      OP_REQUIRES_OK(ctx, ToTfStatus(ParseReduceOp(reduce_op, &reduce_op_)));
    }
    if (ctx->HasAttr("compression")) {
      std::string compression;
      OP_REQUIRES_OK(ctx, ctx->GetAttr("compression", &compression));
      if (!compression.empty()) {  // empty: the job default, resolved by the engine
        CodecSpec spec;
        OP_REQUIRES_OK(ctx, ToTfStatus(ParseCodec(compression, &spec)));
        codec_ = spec;
      }
      OP_REQUIRES_OK(ctx, ctx->GetAttr("error_feedback", &error_feedback_));
    }
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& input = ctx->input(0);
    Engine& engine = Engine::Get();
    OP_REQUIRES_OK_ASYNC(ctx, RequireInitialised(type_string() + " of '" + tensor_name_ + "'"),
                         done);
    if (root_rank_ >= 0) {
      OP_REQUIRES_ASYNC(ctx, root_rank_ < engine.size(),
                        absl::InvalidArgumentError(
                            "broadcast of '" + tensor_name_ + "': root_rank " +
                            std::to_string(root_rank_) + " is not below size " +
                            std::to_string(engine.size())),
                        done);
    }
    // The answer may go into the input's own buffer when nothing else holds it (a gradient
    // usually): no fresh allocation to page in each step. Safe with zero-copy sends: a
    // partition's answer arrives only after the server has all of that partition, so
    // ZeroMQ is done reading it, and partitions do not overlap.
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(
        ctx, ctx->forward_input_or_allocate_output({0}, 0, input.shape(), &output), done);

    PushPullRequest request = RequestFor(tensor_name_, input, output);
    request.root_rank = root_rank_;
    request.members = process_set_;
    request.priority = priority_;
    request.reduce_op = reduce_op_;
    request.codec = codec_;
    request.error_feedback = error_feedback_;
    request.done = CompleteWithStatus(ctx, done);
    engine.Enqueue(std::move(request));
  }

 private:
  std::string tensor_name_;
  int root_rank_ = -1;
  std::vector<int32_t> process_set_;  // members; empty: every worker
  int priority_ = 0;
  ReduceOp reduce_op_ = ReduceOp::kSum;
  std::optional<CodecSpec> codec_;
  int error_feedback_ = -1;
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

// PsPushPull and PsBroadcast on DEVICE_GPU (CUDA builds): the tensor is staged to pinned
// host memory as soon as the kernels producing it are done (gpu_staging.h), the engine sums
// it like a CPU tensor, in place in the pinned buffer, and the answer is copied back into
// the GPU output. The op's thread returns at once; backward goes on meanwhile.
#include "tf_ps_ops/kernels/gpu_staging.h"

#if TFPS_WITH_CUDA

#include <memory>
#include <optional>
#include <string>

#include "tensorflow/core/framework/op_kernel.h"
#include "tf_ps_ops/kernels/tf_adapter.h"

namespace tfps {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;

// The attrs are PsCommOp's (push_pull_ops.cc), read the same way.
class PsCommGpuOp : public AsyncOpKernel {
 public:
  explicit PsCommGpuOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("tensor_name", &tensor_name_));
    if (tensor_name_.empty()) tensor_name_ = name();
    if (ctx->HasAttr("root_rank")) OP_REQUIRES_OK(ctx, ctx->GetAttr("root_rank", &root_rank_));
    if (ctx->HasAttr("priority")) OP_REQUIRES_OK(ctx, ctx->GetAttr("priority", &priority_));
    if (ctx->HasAttr("process_set")) {
      OP_REQUIRES_OK(ctx, ctx->GetAttr("process_set", &process_set_));
    }
    if (ctx->HasAttr("compression")) {
      std::string compression;
      OP_REQUIRES_OK(ctx, ctx->GetAttr("compression", &compression));
      if (!compression.empty()) {
        CodecSpec spec;
        OP_REQUIRES_OK(ctx, ToTfStatus(ParseCodec(compression, &spec)));
        codec_ = spec;
      }
      OP_REQUIRES_OK(ctx, ctx->GetAttr("error_feedback", &error_feedback_));
    }
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& input = ctx->input(0);
    OP_REQUIRES_OK_ASYNC(ctx, RequireInitialised(type_string() + " of '" + tensor_name_ + "'"),
                         done);
    if (root_rank_ >= 0) {
      OP_REQUIRES_ASYNC(ctx, root_rank_ < Engine::Get().size(),
                        absl::InvalidArgumentError(
                            "broadcast of '" + tensor_name_ + "': root_rank " +
                            std::to_string(root_rank_) + " is not below size " +
                            std::to_string(Engine::Get().size())),
                        done);
    }
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(
        ctx, ctx->forward_input_or_allocate_output({0}, 0, input.shape(), &output), done);
    auto host = std::make_shared<Tensor>();
    StageToHost(ctx, input, host.get(), [this, ctx, done, host, output](const absl::Status& s) {
      if (!s.ok()) return FinishAsync(ctx, done, s);
      // The answer overwrites the staged gradient: safe as on the CPU (push_pull_ops.cc).
      PushPullRequest request = RequestFor(tensor_name_, *host, host.get());
      request.root_rank = root_rank_;
      request.members = process_set_;
      request.priority = priority_;
      request.codec = codec_;
      request.error_feedback = error_feedback_;
      request.done = [ctx, done, host, output](const Status& status) {
        if (!status.ok()) return FinishAsync(ctx, done, ToTfStatus(status));
        CopyToDevice(ctx, *host, output, [ctx, done, host](const absl::Status& copied) {
          FinishAsync(ctx, done, copied);
        });
      };
      Engine::Get().Enqueue(std::move(request));
    });
  }

 private:
  std::string tensor_name_;
  int root_rank_ = -1;
  std::vector<int32_t> process_set_;  // members; empty: every worker
  int priority_ = 0;
  std::optional<CodecSpec> codec_;
  int error_feedback_ = -1;
};

// `handles` are resources: always in host memory, nothing to say.
REGISTER_KERNEL_BUILDER(Name("PsPushPull").Device(tensorflow::DEVICE_GPU), PsCommGpuOp);
REGISTER_KERNEL_BUILDER(Name("PsBroadcast").Device(tensorflow::DEVICE_GPU), PsCommGpuOp);

}  // namespace
}  // namespace tfps

#endif  // TFPS_WITH_CUDA

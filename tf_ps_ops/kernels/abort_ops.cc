// PsAbortCollective: this worker raised before a collective's op (a Python check on its
// own input or arguments), so it cannot take part; it still uses up the call number of the
// collective's key, telling the others why, so that they fail that call at once
// (FailedPrecondition) instead of waiting TFPS_TIMEOUT, and the next call under the key
// meets on every worker.
//   path "server": allreduce and broadcast. A push flagged kFlagAbortRound carrying the
//     reason, whole, to every partition the name's last push had (one for a name never
//     pushed); each of those servers fails its round on every worker. Under hierarchical
//     aggregation it goes to the local leader instead (hierarchical.h).
//   path "peer": allgather and alltoall. The peer mesh's abort (kFlagAbort): every peer
//     gets the reason instead of data.
// The op itself always succeeds: the caller raises its own error after it.
#include <memory>
#include <string>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tf_ps_ops/cc/engine/abort_request.h"
#include "tf_ps_ops/kernels/tf_adapter.h"

namespace tfps {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;

class PsAbortCollectiveOp : public AsyncOpKernel {
 public:
  explicit PsAbortCollectiveOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("path", &path_));
    OP_REQUIRES(ctx, !tensor_name_.empty(),
                absl::InvalidArgumentError("PsAbortCollective needs the collective's key"));
    OP_REQUIRES(ctx, path_ == "server" || path_ == "peer",
                absl::InvalidArgumentError("PsAbortCollective: path must be 'server' or "
                                           "'peer', got '" + path_ + "'"));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(ctx, RequireInitialised("aborting '" + tensor_name_ + "'"), done);
    std::string reason = ctx->input(0).scalar<tensorflow::tstring>()();
    if (reason.empty()) reason = "it raised an error before the collective";
    constexpr size_t kMaxReason = 1024;
    if (reason.size() > kMaxReason) reason.resize(kMaxReason);
    if (path_ == "peer") {
      GatherRequest request;
      request.name = tensor_name_;
      request.dtype = DType::kUInt8;
      request.dims = {0};
      request.abort = FailedPrecondition(reason);
      request.done = [done](const Status&, const std::vector<PeerTensor>&) { done(); };
      Engine::Get().EnqueueGather(std::move(request));
      return;
    }
    // The server answers with the error it gives every worker; that is the expected end.
    Engine::Get().Enqueue(
        AbortRoundRequest(tensor_name_, std::move(reason), [done](const Status&) { done(); }));
  }

 private:
  std::string tensor_name_;
  std::string path_;
};

REGISTER_OP("PsAbortCollective")
    .Input("reason: string")
    .Attr("tensor_name: string")
    .Attr("path: string")
    .SetIsStateful()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext*) {
      return absl::OkStatus();
    })
    .Doc(R"doc(
Uses up this worker's next call under `tensor_name` without data: the other workers' call
fails at once with FailedPrecondition naming this worker and `reason`. `path`: "server"
(allreduce, broadcast) or "peer" (allgather, alltoall).
)doc");

REGISTER_KERNEL_BUILDER(Name("PsAbortCollective").Device(tensorflow::DEVICE_CPU),
                        PsAbortCollectiveOp);

}  // namespace
}  // namespace tfps

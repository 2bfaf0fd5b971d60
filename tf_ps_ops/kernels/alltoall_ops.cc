// PsAlltoall: each worker sends splits[p] consecutive rows of its tensor to worker p and
// gets back, in rank order, the rows every worker sent it (Horovod's alltoall). Peer to
// peer over the mesh that serves allgather (engine/peer_mesh.h): only the rows meant for a
// peer travel to it.
#include <memory>
#include <vector>

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
using tensorflow::TensorShape;

template <typename Index>
std::vector<int64_t> SplitsOf(const Tensor& splits) {
  const auto flat = splits.flat<Index>();
  return std::vector<int64_t>(flat.data(), flat.data() + flat.size());
}

// The rows for each rank: `splits` as given, or (empty splits) dims[0] / size each.
absl::Status RowsToSend(const std::string& name, const Tensor& input, const Tensor& splits,
                        int size, std::vector<int64_t>* rows) {
  const int64_t dim0 = input.dim_size(0);
  if (splits.NumElements() == 0) {
    if (dim0 % size != 0) {
      return absl::InvalidArgumentError(
          "alltoall of '" + name + "' without splits: the first dimension (" +
          std::to_string(dim0) + ") must be a multiple of the number of workers (" +
          std::to_string(size) + "), or pass splits");
    }
    rows->assign(size, dim0 / size);
    return absl::OkStatus();
  }
  if (splits.dims() != 1 || splits.NumElements() != size) {
    return absl::InvalidArgumentError("alltoall of '" + name + "': splits must be a vector of " +
                                      std::to_string(size) + " entries (one per worker), got shape " +
                                      splits.shape().DebugString());
  }
  *rows = splits.dtype() == tensorflow::DT_INT32 ? SplitsOf<int32_t>(splits)
                                                 : SplitsOf<int64_t>(splits);
  int64_t total = 0;
  for (int64_t r : *rows) {
    if (r < 0) {
      return absl::InvalidArgumentError("alltoall of '" + name + "': splits has a negative entry");
    }
    total += r;
  }
  if (total > dim0) {
    return absl::InvalidArgumentError(
        "alltoall of '" + name + "': the splits add up to " + std::to_string(total) +
        " rows, more than the tensor's first dimension (" + std::to_string(dim0) + ")");
  }
  return absl::OkStatus();
}

class PsAlltoallOp : public AsyncOpKernel {
 public:
  explicit PsAlltoallOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("tensor_name", &tensor_name_));
    if (tensor_name_.empty()) tensor_name_ = name();
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& input = ctx->input(0);
    OP_REQUIRES_ASYNC(ctx, input.dims() >= 1,
                      absl::InvalidArgumentError("alltoall of '" + tensor_name_ +
                                                 "' needs a tensor of rank >= 1, got a scalar"),
                      done);
    OP_REQUIRES_OK_ASYNC(ctx, RequireInitialised("alltoall of '" + tensor_name_ + "'"), done);
    const int size = Engine::Get().size();
    GatherRequest request;
    // Splits differ by rank: a refusal here is this worker's alone, so it still takes part
    // and tells its peers, which would otherwise wait TFPS_TIMEOUT for its rows.
    const absl::Status refused =
        RowsToSend(tensor_name_, input, ctx->input(1), size, &request.send_rows);
    if (!refused.ok()) {
      request.abort = Status(static_cast<Code>(refused.code()), std::string(refused.message()));
      request.send_rows.assign(size, 0);
    }
    DescribeInput(tensor_name_, input, &request);
    const TensorShape shape = input.shape();
    request.done = CompleteGather(ctx, done, [ctx, shape, size](
                                                 const std::vector<PeerTensor>& parts,
                                                 const StatusCallback& finish) {
      finish(Received(ctx, shape, size, parts));
    });
    Engine::Get().EnqueueGather(std::move(request));
  }

 private:
  // The parts, in rank order, into output 0 and how many rows came from each into output 1.
  static absl::Status Received(OpKernelContext* ctx, TensorShape shape, int size,
                               const std::vector<PeerTensor>& parts) {
    Tensor* received = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(1, TensorShape({size}), &received));
    for (int p = 0; p < size; ++p) {
      received->flat<int32_t>()(p) = static_cast<int32_t>(parts[p].dims[0]);
    }
    const int64_t rows = GatheredRows(parts);
    shape.set_dim(0, rows);
    Tensor* output = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(0, shape, &output));
    ConcatenateRows(parts, rows, output);
    return absl::OkStatus();
  }

  std::string tensor_name_;
};

REGISTER_OP("PsAlltoall")
    .Input("tensor: T")
    .Input("splits: Tsplits")
    .Output("output: T")
    .Output("received_splits: int32")
    .Attr("T: {half, bfloat16, float, double, int8, uint8, int16, uint16, int32, int64, bool}")
    .Attr("Tsplits: {int32, int64} = DT_INT32")
    .Attr("tensor_name: string = ''")
    .SetIsStateful()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle out;
      TF_RETURN_IF_ERROR(c->ReplaceDim(c->input(0), 0, c->UnknownDim(), &out));
      c->set_output(0, out);
      c->set_output(1, c->Vector(c->UnknownDim()));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Sends splits[p] consecutive rows of `tensor` to worker p (an empty `splits`: equal parts)
and returns the rows every worker sent to this one, in rank order, with how many came from
each (`received_splits`). The dtype and every dimension but the first must agree. Peer to
peer.
)doc");

REGISTER_KERNEL_BUILDER(Name("PsAlltoall").Device(tensorflow::DEVICE_CPU), PsAlltoallOp);
#if GOOGLE_CUDA
REGISTER_KERNEL_BUILDER(Name("PsAlltoall")
                            .Device(tensorflow::DEVICE_GPU)
                            .HostMemory("tensor")
                            .HostMemory("splits")
                            .HostMemory("output")
                            .HostMemory("received_splits"),
                        PsAlltoallOp);
#endif

}  // namespace
}  // namespace tfps

// PsNeighbourExchange: send this worker's tensor to some workers and receive the tensors of
// some (usually the same) workers, peer to peer, for decentralized training (docs/algorithms.md).
// Only the listed neighbours' bytes travel: a ring moves 2 copies per worker whatever the
// job's size, where an allgather moves size - 1.
//
// With a codec (fp16, bf16, int8) the tensor is encoded once here, the bytes travel, and
// every receiver decodes them; `sent` is what the neighbours decode of ours, so a sender
// can keep the same public copy of its tensor as its neighbours do (Choco-SGD's x_hat).
#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tf_ps_ops/cc/codec/codec.h"
#include "tf_ps_ops/kernels/tf_adapter.h"

namespace tfps {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

std::string DimsText(const std::vector<int64_t>& dims) {
  std::string text = "[";
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? "," : "") + std::to_string(dims[i]);
  return text + "]";
}

// Ranks from a 1-D int32 tensor: each a worker of the job, not this one, no repeats.
absl::Status ReadRanks(const Tensor& t, const char* what, int rank, int size,
                       const std::string& name, std::vector<int>* out) {
  if (t.dims() != 1) {
    return absl::InvalidArgumentError("neighbour exchange of '" + name + "': " + what +
                                      " must be a vector of ranks, got shape " +
                                      t.shape().DebugString());
  }
  std::set<int> seen;
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    const int r = t.vec<int32_t>()(i);
    if (r < 0 || r >= size || r == rank || !seen.insert(r).second) {
      return absl::InvalidArgumentError(
          "neighbour exchange of '" + name + "' on rank " + std::to_string(rank) + ": " + what +
          " holds " + std::to_string(r) + "; each entry must be another worker's rank (0.." +
          std::to_string(size - 1) + ", not " + std::to_string(rank) + "), listed once");
    }
    out->push_back(r);
  }
  return absl::OkStatus();
}

class PsNeighbourExchangeOp : public AsyncOpKernel {
 public:
  explicit PsNeighbourExchangeOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("tensor_name", &tensor_name_));
    if (tensor_name_.empty()) tensor_name_ = name();
    std::string compression;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("compression", &compression));
    OP_REQUIRES_OK(ctx, ToTfStatus(ParseCodec(compression, &codec_)));
    // Dense, deterministic codecs only: a receiver's decoded copy must equal the sender's.
    OP_REQUIRES(ctx, codec_.id == CodecId::kNone || codec_.id == CodecId::kFp16 ||
                         codec_.id == CodecId::kBf16 || codec_.id == CodecId::kInt8,
                absl::InvalidArgumentError("neighbour exchange of '" + tensor_name_ +
                                           "': compression '" + compression +
                                           "' is not supported; use none, fp16, bf16 or int8"));
    OP_REQUIRES(ctx, codec_.id == CodecId::kNone || ctx->input_type(0) == tensorflow::DT_FLOAT,
                absl::InvalidArgumentError("neighbour exchange of '" + tensor_name_ +
                                           "': compression applies to float32 tensors only"));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    OP_REQUIRES_OK_ASYNC(ctx, RequireInitialised("neighbour exchange of '" + tensor_name_ + "'"),
                         done);
    Engine& engine = Engine::Get();
    const Tensor& input = ctx->input(0);
    GatherRequest request;
    request.neighbours = true;
    OP_REQUIRES_OK_ASYNC(ctx, ReadRanks(ctx->input(1), "send_to", engine.rank(), engine.size(),
                                        tensor_name_, &request.send_to), done);
    OP_REQUIRES_OK_ASYNC(ctx, ReadRanks(ctx->input(2), "recv_from", engine.rank(),
                                        engine.size(), tensor_name_, &request.recv_from), done);
    TensorShape out_shape = input.shape();
    out_shape.InsertDim(0, static_cast<int64_t>(request.recv_from.size()));
    Tensor* received = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, out_shape, &received), done);
    OP_REQUIRES_OK_ASYNC(ctx, Describe(ctx, input, &request), done);

    request.done = CompleteGather(
        ctx, done, [this, received, from = request.recv_from, expected = request.dims, input](
                       const std::vector<PeerTensor>& parts, const StatusCallback& finish) {
          finish(Receive(input, from, expected, parts, received));
        });
    engine.EnqueueGather(std::move(request));
  }

 private:
  // The parts of `from`, in that order, decoded if need be, into `received`.
  absl::Status Receive(const Tensor& input, const std::vector<int>& from,
                       const std::vector<int64_t>& expected, const std::vector<PeerTensor>& parts,
                       Tensor* received) const {
    const uint64_t n = static_cast<uint64_t>(input.NumElements());
    const size_t bytes = input.TotalBytes();
    char* dst = const_cast<char*>(received->tensor_data().data());
    for (size_t i = 0; i < from.size(); ++i) {
      const PeerTensor& p = parts[from[i]];
      if (p.dims != expected) {
        return absl::FailedPreconditionError(  // Horovod's class for a mismatch
            "neighbour exchange of '" + tensor_name_ + "': worker " + std::to_string(from[i]) +
            " sent a part of shape " + DimsText(p.dims) + " where this worker's tensor " +
            input.shape().DebugString() + " makes " + DimsText(expected) + " (compression '" +
            CodecName(codec_) + "'): every worker must pass the same shape and compression");
      }
      char* slot = dst + i * bytes;
      if (codec_.id == CodecId::kNone) {
        if (bytes > 0) std::memcpy(slot, p.data, bytes);
        continue;
      }
      TF_RETURN_IF_ERROR(ToTfStatus(Decode(codec_.id, static_cast<const uint8_t*>(p.data), n, 0,
                                           0, reinterpret_cast<float*>(slot))));
    }
    return absl::OkStatus();
  }

  // What travels: the tensor itself, or its encoding (then `sent` is the decoded encoding).
  absl::Status Describe(OpKernelContext* ctx, const Tensor& input, GatherRequest* request) {
    if (codec_.id == CodecId::kNone) {
      DescribeInput(tensor_name_, input, request);
      ctx->set_output(1, input);
      return absl::OkStatus();
    }
    const uint64_t n = static_cast<uint64_t>(input.NumElements());
    const uint64_t bytes = EncodedBytes(codec_.id, n, 0);
    auto encoded = std::make_shared<std::vector<uint8_t>>(bytes);
    const float* in = input.flat<float>().data();
    TF_RETURN_IF_ERROR(ToTfStatus(Encode(codec_.id, in, n, 0, 0, encoded->data())));
    Tensor* sent = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(1, input.shape(), &sent));
    TF_RETURN_IF_ERROR(ToTfStatus(
        Decode(codec_.id, encoded->data(), n, 0, 0, sent->flat<float>().data())));
    request->name = tensor_name_;
    request->dtype = DType::kUInt8;
    request->dims = {static_cast<int64_t>(bytes)};
    request->count = bytes;
    request->input = encoded->data();
    request->input_holder = encoded;
    return absl::OkStatus();
  }

  std::string tensor_name_;
  CodecSpec codec_;
};

REGISTER_OP("PsNeighbourExchange")
    .Input("tensor: T")
    .Input("send_to: int32")
    .Input("recv_from: int32")
    .Input("handles: N * resource")
    .Output("received: T")
    .Output("sent: T")
    .Attr("T: {half, bfloat16, float, double}")
    .Attr("tensor_name: string = ''")
    .Attr("compression: string = 'none'")
    .Attr("N: int >= 0 = 0")
    .SetIsStateful()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle out;
      TF_RETURN_IF_ERROR(c->Concatenate(c->Vector(c->Dim(c->input(2), 0)), c->input(0), &out));
      c->set_output(0, out);
      c->set_output(1, c->input(0));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Sends `tensor` to the workers in `send_to` and returns the tensors of the workers in
`recv_from` (stacked on a new first dimension, in that order), peer to peer. Every worker
must call it under the same `tensor_name` equally often, with schedules that agree (if A
sends to B, B receives from A). Shapes must agree.
compression: none, fp16, bf16 or int8 (float32 only): what travels; `received` holds the
  decoded tensors and `sent` what the neighbours decode of ours (`tensor` itself for none).
handles: optional: the variable the tensor belongs to, so that a tf.function orders the
  op only against that variable and it overlaps with the rest of the step.
)doc");

REGISTER_KERNEL_BUILDER(Name("PsNeighbourExchange").Device(tensorflow::DEVICE_CPU),
                        PsNeighbourExchangeOp);
#if GOOGLE_CUDA
REGISTER_KERNEL_BUILDER(Name("PsNeighbourExchange")
                            .Device(tensorflow::DEVICE_GPU)
                            .HostMemory("tensor")
                            .HostMemory("send_to")
                            .HostMemory("recv_from")
                            .HostMemory("received")
                            .HostMemory("sent"),
                        PsNeighbourExchangeOp);
#endif

}  // namespace
}  // namespace tfps

// PsPushPull and PsBroadcast: asynchronous kernels that hand a tensor to the engine and
// return their thread; the engine calls back when every partition's answer is written.
//
// On a GPU (CUDA builds) the tensor is staged to pinned host memory as soon as the kernels
// producing it are done (staging.h), the engine sums it like a CPU tensor, in place in the
// pinned buffer, and the answer is copied back into the GPU output; backward goes on
// meanwhile. Two GPU calls keep the tensor on the device instead (TakenOnDevice): where the
// host's workers sum GPU tensors with NCCL (nccl_local_reduce.h) the engine takes the GPU
// buffers and only the local leader stages, and a compressed call is encoded and decoded on
// the GPU (gpu_push_codec.h).
#include <memory>
#include <optional>
#include <string>

#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tf_ps_ops/kernels/comm_attrs.h"
#include "tf_ps_ops/kernels/staging.h"
#include "tf_ps_ops/kernels/tf_adapter.h"
#if TFPS_WITH_CUDA
#include "tf_ps_ops/kernels/gpu_push_codec.h"
#include "tf_ps_ops/kernels/nccl_local_reduce.h"
#endif

namespace tfps {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;

constexpr char kCommTypes[] =
    "T: {half, bfloat16, float, double, int8, uint8, int16, uint16, int32, int64, bool}";

// Whether the device took the call without staging (true: it calls done). None does on
// the CPU; the GPU's are below.
template <typename Staging>
bool TakenOnDevice(OpKernelContext* ctx, const CommAttrs& attrs, const Tensor& input,
                   Tensor* output, AsyncOpKernel::DoneCallback done) {
  return false;
}

template <typename Staging>
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
    // ZeroMQ is done reading it, and partitions do not overlap. On the GPU it overwrites
    // the staged gradient in pinned memory, as safely.
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(
        ctx, ctx->forward_input_or_allocate_output({0}, 0, input.shape(), &output), done);
    if (TakenOnDevice<Staging>(ctx, attrs_, input, output, done)) return;
    auto host = std::make_shared<Tensor>();
    Staging::ToHost(ctx, input, host.get(), [this, ctx, done, host, output](const absl::Status& s) {
      if (!s.ok()) return FinishAsync(ctx, done, s);
      Tensor* answer = Staging::kCopies ? host.get() : output;
      PushPullRequest request = attrs_.Request(*host, answer);
      request.done = [ctx, done, host, answer, output](const Status& status) {
        if (!status.ok()) return FinishAsync(ctx, done, ToTfStatus(status));
        Staging::ToDevice(ctx, *answer, output, [ctx, done, host](const absl::Status& copied) {
          FinishAsync(ctx, done, copied);
        });
      };
      Engine::Get().Enqueue(std::move(request));
    });
  }

 private:
  CommAttrs attrs_;
};

#if TFPS_WITH_CUDA
// The GPU buffer of `request.input` and an event recorded on the op's compute stream after
// the input's producers; an error finishes the op (false).
bool ReadyOnDevice(OpKernelContext* ctx, const CommAttrs& attrs, const PushPullRequest& request,
                   int* device, void** ready, AsyncOpKernel::DoneCallback done) {
  void* stream = nullptr;
  const absl::Status got = ComputeStream(ctx, &stream);
  if (!got.ok()) {
    FinishAsync(ctx, done, got);
    return false;
  }
  Status s = DeviceOfPointer(request.input, device);
  if (s.ok()) s = RecordReadyEvent(stream, ready);
  if (!s.ok()) {
    FinishAsync(ctx, done, ToTfStatus(s.WithPrefix(ctx->op_kernel().type_string() + " of '" +
                                                   attrs.tensor_name + "' on the GPU: ")));
    return false;
  }
  return true;
}

// When this host sums GPU tensors with NCCL (device_reduce.h) and the call goes the
// hierarchical way, the engine takes the GPU buffers themselves: no staging here, the
// local leader alone copies the local sum to the host.
bool PushPullOnDevice(OpKernelContext* ctx, const CommAttrs& attrs, const Tensor& input,
                      Tensor* output, AsyncOpKernel::DoneCallback done) {
  PushPullRequest request = attrs.Request(input, output);
  if (input.NumElements() == 0 || !Engine::Get().TakesDeviceTensor(request)) return false;
  void* ready = nullptr;
  if (!ReadyOnDevice(ctx, attrs, request, &request.device, &ready, done)) return true;
  request.device_ready = ready;
  request.input_holder = std::make_shared<Tensor>(input);
  request.done = [ctx, done, ready](const Status& status) {
    ReleaseReadyEvent(ready);
    FinishAsync(ctx, done, ToTfStatus(status));
  };
  Engine::Get().Enqueue(std::move(request));
  return true;
}

// When the engine would compress this call (its codec, or TFPS_COMPRESSION), the GPU
// encodes and decodes (gpu_push_codec.h): only the encoded bytes cross PCIe.
bool PushPullCompressedOnDevice(OpKernelContext* ctx, const CommAttrs& attrs,
                                const Tensor& input, Tensor* output,
                                AsyncOpKernel::DoneCallback done) {
  PushPullRequest request = attrs.Request(input, output);
  CodecSpec spec;
  if (input.NumElements() == 0 || input.dtype() != tensorflow::DT_FLOAT ||
      !Engine::Get().EncodesOnDevice(request, &spec)) {
    return false;
  }
  int device = -1;
  void* ready = nullptr;
  if (!ReadyOnDevice(ctx, attrs, request, &device, &ready, done)) return true;
  auto codec = std::make_shared<GpuPushCodec>(
      attrs.tensor_name, device, static_cast<const float*>(request.input),
      static_cast<float*>(request.output), request.count, ready);
  request.device_codec = codec;
  request.input_holder = std::make_shared<Tensor>(input);
  auto holder = std::make_shared<Tensor>(*output);  // the output, alive until decoded
  request.done = [ctx, done, ready, codec, holder](const Status& status) {
    Status decoded = status;
    if (decoded.ok()) decoded = codec->DecodeInto();
    ReleaseReadyEvent(ready);
    FinishAsync(ctx, done, ToTfStatus(decoded));
  };
  // Handed to the engine once the gradient is there, so the engine thread never waits
  // for TF's kernels (where the device cannot say, at once: the codec's stream waits on
  // `ready` either way).
  auto shared = std::make_shared<PushPullRequest>(std::move(request));
  const absl::Status later = WhenStreamDone(
      ctx, [shared]() { Engine::Get().Enqueue(std::move(*shared)); });
  if (!later.ok()) Engine::Get().Enqueue(std::move(*shared));
  return true;
}

template <>
bool TakenOnDevice<GpuStaging>(OpKernelContext* ctx, const CommAttrs& attrs,
                               const Tensor& input, Tensor* output,
                               AsyncOpKernel::DoneCallback done) {
  return PushPullOnDevice(ctx, attrs, input, output, done) ||
         PushPullCompressedOnDevice(ctx, attrs, input, output, done);
}
#endif  // TFPS_WITH_CUDA

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

REGISTER_KERNEL_BUILDER(Name("PsPushPull").Device(tensorflow::DEVICE_CPU), PsCommOp<CpuStaging>);
REGISTER_KERNEL_BUILDER(Name("PsBroadcast").Device(tensorflow::DEVICE_CPU), PsCommOp<CpuStaging>);
#if TFPS_WITH_CUDA
// `handles` are resources: always in host memory, nothing to say.
REGISTER_KERNEL_BUILDER(Name("PsPushPull").Device(tensorflow::DEVICE_GPU), PsCommOp<GpuStaging>);
REGISTER_KERNEL_BUILDER(Name("PsBroadcast").Device(tensorflow::DEVICE_GPU), PsCommOp<GpuStaging>);
#endif

}  // namespace
}  // namespace tfps

// PsPushPull and PsBroadcast on DEVICE_GPU (CUDA builds): the tensor is staged to pinned
// host memory as soon as the kernels producing it are done (gpu_staging.h), the engine sums
// it like a CPU tensor, in place in the pinned buffer, and the answer is copied back into
// the GPU output. The op's thread returns at once; backward goes on meanwhile. Where the
// host's workers sum GPU tensors with NCCL (hierarchical aggregation), the engine takes the
// GPU buffers instead and only the local leader stages (nccl_local_reduce.h).
#include "tf_ps_ops/kernels/gpu_staging.h"

#if TFPS_WITH_CUDA

#include <memory>
#include <optional>
#include <string>

#include "tensorflow/core/framework/op_kernel.h"
#include "tf_ps_ops/kernels/comm_attrs.h"
#include "tf_ps_ops/kernels/gpu_push_codec.h"
#include "tf_ps_ops/kernels/nccl_local_reduce.h"
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
  // The attrs and checks are PsCommOp's (push_pull_ops.cc), shared (comm_attrs.h).
  explicit PsCommGpuOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, attrs_.Read(ctx));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& input = ctx->input(0);
    OP_REQUIRES_OK_ASYNC(ctx, attrs_.Check(type_string()), done);
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(
        ctx, ctx->forward_input_or_allocate_output({0}, 0, input.shape(), &output), done);
    if (PushPullOnDevice(ctx, input, output, done)) return;
    if (PushPullCompressedOnDevice(ctx, input, output, done)) return;
    auto host = std::make_shared<Tensor>();
    StageToHost(ctx, input, host.get(), [this, ctx, done, host, output](const absl::Status& s) {
      if (!s.ok()) return FinishAsync(ctx, done, s);
      // The answer overwrites the staged gradient: safe as on the CPU (push_pull_ops.cc).
      PushPullRequest request = attrs_.Request(*host, host.get());
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
  // When this host sums GPU tensors with NCCL (device_reduce.h) and the call goes the
  // hierarchical way, the engine takes the GPU buffers themselves: no staging here, the
  // local leader alone copies the local sum to the host. True when it took the call.
  bool PushPullOnDevice(OpKernelContext* ctx, const Tensor& input, Tensor* output,
                        DoneCallback done) {
    PushPullRequest request = attrs_.Request(input, output);
    if (input.NumElements() == 0 || !Engine::Get().TakesDeviceTensor(request)) return false;
    void* stream = nullptr;
    void* ready = nullptr;
    const absl::Status got = ComputeStream(ctx, &stream);
    if (!got.ok()) {
      FinishAsync(ctx, done, got);
      return true;
    }
    Status s = DeviceOfPointer(request.input, &request.device);
    if (s.ok()) s = RecordReadyEvent(stream, &ready);  // after the input's producers
    if (!s.ok()) {
      FinishAsync(ctx, done, ToTfStatus(s.WithPrefix(type_string() + " of '" +
                                                     attrs_.tensor_name + "' on the GPU: ")));
      return true;
    }
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
  // encodes and decodes (gpu_push_codec.h): only the encoded bytes cross PCIe. True when it
  // took the call.
  bool PushPullCompressedOnDevice(OpKernelContext* ctx, const Tensor& input, Tensor* output,
                                  DoneCallback done) {
    PushPullRequest request = attrs_.Request(input, output);
    CodecSpec spec;
    if (input.NumElements() == 0 || input.dtype() != tensorflow::DT_FLOAT ||
        !Engine::Get().EncodesOnDevice(request, &spec)) {
      return false;
    }
    void* stream = nullptr;
    void* ready = nullptr;
    const absl::Status got = ComputeStream(ctx, &stream);
    if (!got.ok()) {
      FinishAsync(ctx, done, got);
      return true;
    }
    int device = -1;
    Status s = DeviceOfPointer(request.input, &device);
    if (s.ok()) s = RecordReadyEvent(stream, &ready);  // after the input's producers
    if (!s.ok()) {
      FinishAsync(ctx, done, ToTfStatus(s.WithPrefix(type_string() + " of '" +
                                                     attrs_.tensor_name + "' on the GPU: ")));
      return true;
    }
    auto codec = std::make_shared<GpuPushCodec>(
        attrs_.tensor_name, device, static_cast<const float*>(request.input),
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

  CommAttrs attrs_;
};

// `handles` are resources: always in host memory, nothing to say.
REGISTER_KERNEL_BUILDER(Name("PsPushPull").Device(tensorflow::DEVICE_GPU), PsCommGpuOp);
REGISTER_KERNEL_BUILDER(Name("PsBroadcast").Device(tensorflow::DEVICE_GPU), PsCommGpuOp);

}  // namespace
}  // namespace tfps

#endif  // TFPS_WITH_CUDA

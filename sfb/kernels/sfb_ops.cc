// SfbFactorGradient: a fully-connected layer's weight gradient by Sufficient Factor
// Broadcasting. Each worker sends its factors (u = dy, v = x) to every other worker, peer
// to peer, through the engine's allgather; every worker then rebuilds the same
// G = sum_p v_p^T u_p in rank order (rebuild.h says why it is bit-identical everywhere).
//
// The op takes the variable's resource handle without reading it: a stateful op with a
// resource input is ordered by tf.function's automatic control dependencies only against
// ops on that resource, so the exchange overlaps the rest of backward (wait-free backprop).
//
// One kernel for both devices; what differs is SfbOnCpu / SfbOnGpu (packing the message,
// rebuilding G) and the staging (tf_ps_ops/kernels/staging.h). On a GPU (CUDA builds) the
// message is packed on the GPU (two strided copies on the op's stream), staged to pinned
// host memory and exchanged like the CPU's; every worker's rows are then copied back to
// the GPU in rank order and G is rebuilt there (tf_ps_ops/cc/gpu/sfb_rebuild.h), on the
// op's stream, bit-identical to the CPU rebuild: CPU and GPU replicas may train together.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "sfb/kernels/rebuild.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"
#include "tf_ps_ops/kernels/staging.h"
#include "tf_ps_ops/kernels/tf_adapter.h"
#if TFPS_WITH_CUDA
#include <cuda_runtime.h>

#include "tf_ps_ops/cc/gpu/sfb_rebuild.h"
#endif

namespace tfps {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

// The CPU's part: packing with std::copy, the rebuild on TF's CPU threads.
template <typename T>
struct SfbOnCpu {
  using Staging = CpuStaging;

  // Row i of `message` (K x (M + N)) := [u_i | v_i].
  static absl::Status Pack(OpKernelContext* ctx, const std::string& name, const Tensor& u,
                           const Tensor& v, Tensor* message) {
    const int64_t k = u.dim_size(0), m = u.dim_size(1), n = v.dim_size(1);
    const T* u_data = u.flat<T>().data();
    const T* v_data = v.flat<T>().data();
    T* rows = message->flat<T>().data();
    for (int64_t i = 0; i < k; ++i) {
      std::copy(u_data + i * m, u_data + (i + 1) * m, rows + i * (m + n));
      std::copy(v_data + i * n, v_data + (i + 1) * n, rows + i * (m + n) + m);
    }
    return absl::OkStatus();
  }

  // On the engine thread: the parts live only during this call, so they are repacked here
  // (K*(M+N) values, cheap); the N*M*K rebuild goes to TF's threads, so the engine thread
  // goes back to the network at once.
  static void Rebuild(OpKernelContext* ctx, int64_t m, int64_t n, T divisor,
                      const std::vector<PeerTensor>& parts, const StatusCallback& finish) {
    auto packed = std::make_shared<sfb::PackedFactors<T>>();
    sfb::ResizePacked(m, n, GatheredRows(parts), packed.get());
    int64_t row0 = 0;
    for (const PeerTensor& part : parts) {
      sfb::PackRows(static_cast<const T*>(part.data), part.dims[0], row0, packed.get());
      row0 += part.dims[0];
    }
    auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
    threads->workers->Schedule([ctx, packed, divisor, threads, finish]() {
      finish(RebuildOnThreads(ctx, *packed, divisor, threads));
    });
  }

  static absl::Status RebuildOnThreads(OpKernelContext* ctx, const sfb::PackedFactors<T>& packed,
                                       T divisor,
                                       const tensorflow::DeviceBase::CpuWorkerThreads* threads) {
    Tensor* output = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(0, TensorShape({packed.n, packed.m}), &output));
    T* g = output->flat<T>().data();
    // Threads take disjoint rows of G; each element's sum is the same whatever the split.
    const int64_t cost_per_row = 2 * packed.m * packed.ktot;
    tensorflow::Shard(threads->num_threads, threads->workers, packed.n, cost_per_row,
                      [&](int64_t begin, int64_t end) {
                        sfb::RebuildRows(packed, divisor, begin, end, g);
                      });
    return absl::OkStatus();
  }
};

#if TFPS_WITH_CUDA
absl::Status CudaToTf(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(what + ": " + cudaGetErrorString(err));
}

// The GPU's part: packing with strided copies and the rebuild on the op's stream.
template <typename T>
struct SfbOnGpu {
  using Staging = GpuStaging;

  static absl::Status Pack(OpKernelContext* ctx, const std::string& name, const Tensor& u,
                           const Tensor& v, Tensor* message) {
    const int64_t k = u.dim_size(0), m = u.dim_size(1), n = v.dim_size(1);
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(ComputeStream(ctx, &stream));
    if (k == 0) return absl::OkStatus();
    char* rows = const_cast<char*>(message->tensor_data().data());
    const size_t row = (m + n) * sizeof(T);
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (m > 0) {
      TF_RETURN_IF_ERROR(CudaToTf(
          cudaMemcpy2DAsync(rows, row, u.tensor_data().data(), m * sizeof(T), m * sizeof(T), k,
                            cudaMemcpyDeviceToDevice, s),
          "packing u of '" + name + "'"));
    }
    if (n > 0) {
      TF_RETURN_IF_ERROR(CudaToTf(
          cudaMemcpy2DAsync(rows + m * sizeof(T), row, v.tensor_data().data(), n * sizeof(T),
                            n * sizeof(T), k, cudaMemcpyDeviceToDevice, s),
          "packing v of '" + name + "'"));
    }
    return absl::OkStatus();
  }

  // On the engine thread: the parts are copied into one pinned buffer (they live only
  // during this call), which goes to the GPU; the rebuild is queued once it is there.
  static void Rebuild(OpKernelContext* ctx, int64_t m, int64_t n, T divisor,
                      const std::vector<PeerTensor>& parts, const StatusCallback& finish) {
    const int64_t ktot = GatheredRows(parts);
    const tensorflow::DataType dtype = tensorflow::DataTypeToEnum<T>::value;
    auto host = std::make_shared<Tensor>();
    auto rows = std::make_shared<Tensor>();
    absl::Status s = AllocatePinned(ctx, dtype, TensorShape({ktot, m + n}), host.get());
    if (s.ok()) s = ctx->allocate_temp(dtype, TensorShape({ktot, m + n}), rows.get());
    if (!s.ok()) return finish(s);
    ConcatenateRows(parts, ktot, host.get());  // rank order
    CopyToDevice(ctx, *host, rows.get(), [ctx, host, rows, ktot, m, n, divisor,
                                          finish](const absl::Status& copied) {
      if (!copied.ok()) return finish(copied);
      // `rows` may be freed after this: TF's GPU allocator hands its memory out again only
      // to work queued after the rebuild on the same stream.
      finish(RebuildOnStream(ctx, *rows, ktot, m, n, divisor));
    });
  }

  static absl::Status RebuildOnStream(OpKernelContext* ctx, const Tensor& rows, int64_t ktot,
                                      int64_t m, int64_t n, T divisor) {
    void* stream = nullptr;
    TF_RETURN_IF_ERROR(ComputeStream(ctx, &stream));
    Tensor* output = nullptr;
    TF_RETURN_IF_ERROR(ctx->allocate_output(0, TensorShape({n, m}), &output));
    return ToTfStatus(gpu::SfbRebuild(rows.flat<T>().data(), ktot, m, n, divisor,
                                      output->flat<T>().data(), stream));
  }
};
#endif  // TFPS_WITH_CUDA

// `Device`: SfbOnCpu<T> or SfbOnGpu<T>.
template <typename T, typename Device>
class SfbFactorGradientOp : public AsyncOpKernel {
 public:
  explicit SfbFactorGradientOp(OpKernelConstruction* ctx) : AsyncOpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("tensor_name", &tensor_name_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("average", &average_));
    if (tensor_name_.empty()) tensor_name_ = name();
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Tensor& u = ctx->input(0);
    const Tensor& v = ctx->input(1);
    OP_REQUIRES_ASYNC(
        ctx, u.dims() == 2 && v.dims() == 2 && u.dim_size(0) == v.dim_size(0),
        absl::InvalidArgumentError("sufficient factors of '" + tensor_name_ +
                                   "' must be matrices with the same number of rows, got u " +
                                   u.shape().DebugString() + " and v " +
                                   v.shape().DebugString()),
        done);
    OP_REQUIRES_OK_ASYNC(
        ctx, RequireInitialised("the sufficient factor exchange of '" + tensor_name_ + "'"), done);
    const int64_t k = u.dim_size(0), m = u.dim_size(1), n = v.dim_size(1);

    // One message per worker carries both factors, row k being [u_k | v_k]: one gather,
    // one callback, and the engine checks that every worker agrees on M + N. Held until
    // it is staged (on the GPU, TF's device-to-host stream reads it).
    auto message = std::make_shared<Tensor>();
    OP_REQUIRES_OK_ASYNC(
        ctx, ctx->allocate_temp(u.dtype(), TensorShape({k, m + n}), message.get()), done);
    OP_REQUIRES_OK_ASYNC(ctx, Device::Pack(ctx, tensor_name_, u, v, message.get()), done);
    const T divisor = average_ ? static_cast<T>(Engine::Get().size()) : T(1);
    auto host = std::make_shared<Tensor>();
    Device::Staging::ToHost(ctx, *message, host.get(), [this, ctx, done, host, message, m, n,
                                                        divisor](const absl::Status& s) {
      if (!s.ok()) return FinishAsync(ctx, done, s);
      GatherRequest request;
      DescribeInput(tensor_name_, *host, &request);
      request.done = CompleteGather(ctx, done, [ctx, m, n, divisor](
                                                   const std::vector<PeerTensor>& parts,
                                                   const StatusCallback& finish) {
        Device::Rebuild(ctx, m, n, divisor, parts, finish);
      });
      Engine::Get().EnqueueGather(std::move(request));
    });
  }

 private:
  std::string tensor_name_;
  bool average_ = true;
};

REGISTER_OP("SfbFactorGradient")
    .Input("u: T")
    .Input("v: T")
    .Input("handle: resource")
    .Output("gradient: T")
    .Attr("T: {float, double}")
    .Attr("tensor_name: string = ''")
    .Attr("average: bool = true")
    .SetIsStateful()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext* c) {
      tensorflow::shape_inference::ShapeHandle u, v;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &u));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &v));
      c->set_output(0, c->Matrix(c->Dim(v, 1), c->Dim(u, 1)));
      return absl::OkStatus();
    })
    .Doc(R"doc(
The weight gradient of a fully-connected layer y = x W, summed over all workers from their
sufficient factors: sum over workers p, in rank order, of v_p^T u_p, divided by the number
of workers if `average`. Peer to peer; bit-identical on every worker.

u: this worker's dL/dy, K x M (K may differ between workers).
v: this worker's layer input x, K x N.
handle: the kernel variable's resource; not read, it only orders the op (see the file comment).
gradient: N x M, the shape of W.
tensor_name: identical on every worker; the n-th call meets the others' n-th call.
)doc");

#define TFPS_SFB_KERNEL(DEVICE, T, ON_DEVICE)                                              \
  REGISTER_KERNEL_BUILDER(                                                                 \
      Name("SfbFactorGradient").Device(tensorflow::DEVICE).TypeConstraint<T>("T"),         \
      SfbFactorGradientOp<T, ON_DEVICE<T>>)

TFPS_SFB_KERNEL(DEVICE_CPU, float, SfbOnCpu);
TFPS_SFB_KERNEL(DEVICE_CPU, double, SfbOnCpu);
#if TFPS_WITH_CUDA
TFPS_SFB_KERNEL(DEVICE_GPU, float, SfbOnGpu);
TFPS_SFB_KERNEL(DEVICE_GPU, double, SfbOnGpu);
#endif

}  // namespace
}  // namespace tfps

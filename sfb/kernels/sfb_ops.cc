// SfbFactorGradient: a fully-connected layer's weight gradient by Sufficient Factor
// Broadcasting. Each worker sends its factors (u = dy, v = x) to every other worker, peer
// to peer, through the engine's allgather; every worker then rebuilds the same
// G = sum_p v_p^T u_p in rank order (rebuild.h says why it is bit-identical everywhere).
//
// The op takes the variable's resource handle without reading it: a stateful op with a
// resource input is ordered by tf.function's automatic control dependencies only against
// ops on that resource, so the exchange overlaps the rest of backward (wait-free backprop).
#include <algorithm>
#include <memory>
#include <vector>

#include "sfb/kernels/rebuild.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"
#include "tf_ps_ops/kernels/tf_adapter.h"

namespace tfps {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

template <typename T>
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
    Engine& engine = Engine::Get();
    const int64_t k = u.dim_size(0), m = u.dim_size(1), n = v.dim_size(1);

    // One message per worker carries both factors, row k being [u_k | v_k]: one gather,
    // one callback, and the engine checks that every worker agrees on M + N.
    Tensor message;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_temp(u.dtype(), TensorShape({k, m + n}), &message),
                         done);
    const T* u_data = u.flat<T>().data();
    const T* v_data = v.flat<T>().data();
    T* rows = message.flat<T>().data();
    for (int64_t i = 0; i < k; ++i) {
      std::copy(u_data + i * m, u_data + (i + 1) * m, rows + i * (m + n));
      std::copy(v_data + i * n, v_data + (i + 1) * n, rows + i * (m + n) + m);
    }

    GatherRequest request;
    DescribeInput(tensor_name_, message, &request);
    const T divisor = average_ ? static_cast<T>(engine.size()) : T(1);
    request.done = [ctx, done, m, n, divisor](const Status& status,
                                              const std::vector<PeerTensor>& parts) {
      if (!status.ok()) {
        CompleteWithStatus(ctx, done)(status);
        return;
      }
      // The parts live only during this callback: repack them (K*(M+N) values, cheap),
      // then leave the N*M*K rebuild to TF's threads so the engine thread goes back to
      // the network at once.
      auto packed = std::make_shared<sfb::PackedFactors<T>>();
      int64_t ktot = 0;
      for (const PeerTensor& part : parts) ktot += part.dims[0];
      sfb::ResizePacked(m, n, ktot, packed.get());
      int64_t row0 = 0;
      for (const PeerTensor& part : parts) {
        sfb::PackRows(static_cast<const T*>(part.data), part.dims[0], row0, packed.get());
        row0 += part.dims[0];
      }
      auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
      threads->workers->Schedule([ctx, done, packed, divisor, threads]() {
        Rebuild(ctx, *packed, divisor, threads);
        done();
      });
    };
    engine.EnqueueGather(std::move(request));
  }

 private:
  static void Rebuild(OpKernelContext* ctx, const sfb::PackedFactors<T>& packed, T divisor,
                      const tensorflow::DeviceBase::CpuWorkerThreads* threads) {
    Tensor* output = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({packed.n, packed.m}), &output));
    T* g = output->flat<T>().data();
    // Threads take disjoint rows of G; each element's sum is the same whatever the split.
    const int64_t cost_per_row = 2 * packed.m * packed.ktot;
    tensorflow::Shard(threads->num_threads, threads->workers, packed.n, cost_per_row,
                      [&](int64_t begin, int64_t end) {
                        sfb::RebuildRows(packed, divisor, begin, end, g);
                      });
  }

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

REGISTER_KERNEL_BUILDER(
    Name("SfbFactorGradient").Device(tensorflow::DEVICE_CPU).TypeConstraint<float>("T"),
    SfbFactorGradientOp<float>);
REGISTER_KERNEL_BUILDER(
    Name("SfbFactorGradient").Device(tensorflow::DEVICE_CPU).TypeConstraint<double>("T"),
    SfbFactorGradientOp<double>);
// GPU kernels (CUDA builds): sfb_ops_gpu.cc.

}  // namespace
}  // namespace tfps

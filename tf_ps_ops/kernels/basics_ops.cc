// PsRank, PsSize, PsLocalRank, PsLocalSize: the cluster's shape as ops (Horovod's
// rank_op() & co.), evaluated when the graph runs, not when it is traced.
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tf_ps_ops/kernels/tf_adapter.h"

namespace tfps {
namespace {

using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;

template <int (Engine::*Getter)() const>
class EngineScalarOp : public OpKernel {
 public:
  explicit EngineScalarOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    OP_REQUIRES_OK(ctx, RequireInitialised(type_string()));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int32_t>()() = (Engine::Get().*Getter)();
  }
};

#define TFPS_REGISTER_SCALAR_OP(NAME, GETTER)                                         \
  REGISTER_OP(NAME)                                                                   \
      .Output("value: int32")                                                         \
      .SetIsStateful()                                                                \
      .SetShapeFn(tensorflow::shape_inference::ScalarShape);                          \
  REGISTER_KERNEL_BUILDER(Name(NAME).Device(tensorflow::DEVICE_CPU),                  \
                          EngineScalarOp<&Engine::GETTER>)

TFPS_REGISTER_SCALAR_OP("PsRank", rank);
TFPS_REGISTER_SCALAR_OP("PsSize", size);
TFPS_REGISTER_SCALAR_OP("PsLocalRank", local_rank);
TFPS_REGISTER_SCALAR_OP("PsLocalSize", local_size);

}  // namespace
}  // namespace tfps

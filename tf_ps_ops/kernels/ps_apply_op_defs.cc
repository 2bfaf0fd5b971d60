// Op definitions of PS mode (PsInitVariable, PsApplyXXX, PsSparseApplyXXX): the inputs and
// attrs of TensorFlow's ResourceApplyXXX / ResourceSparseApplyXXX, so a graph rewrite is a
// 1:1 node swap. Their kernels are in ps_apply_ops.cc; which optimizer each runs, and the
// TF op each replaces, is in ps_op_table.cc.
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tfps {
namespace {

// Op definitions: ResourceApplyXXX's inputs and attrs, plus `tensor_name` (the key; by
// default the variable's shared name).
#define TFPS_PS_OP(OP) \
  REGISTER_OP(OP).Attr("tensor_name: string = ''").Attr("use_locking: bool = false")

static absl::Status NoOutputs(tensorflow::shape_inference::InferenceContext*) {
  return absl::OkStatus();
}

REGISTER_OP("PsInitVariable")
    .Input("var: resource")
    .Attr("tensor_name: string = ''")
    .Attr("overwrite: bool = false")
    .Attr("slot: int = -2")
    .SetIsStateful()
    .SetShapeFn(NoOutputs)
    .Doc("PS mode: rank 0's value of `var` goes to the servers unless they hold the "
         "parameter (or, with overwrite, replacing it and resetting its slots); every rank "
         "adopts the servers' value. With slot k >= -1, the same about the parameter's "
         "optimizer slot k (-1: its optimizer's code): `var` (the parameter's shape) gets "
         "the slot, or with overwrite rank 0's `var` replaces it.");

TFPS_PS_OP("PsApplyGradientDescent")
    .Input("var: resource").Input("alpha: T").Input("delta: T")
    .Attr("T: {float, double}").SetIsStateful().SetShapeFn(NoOutputs)
    .Doc("PS-mode ResourceApplyGradientDescent: var -= alpha * mean(delta over workers).");
TFPS_PS_OP("PsApplyMomentum")
    .Input("var: resource").Input("accum: resource").Input("lr: T").Input("grad: T")
    .Input("momentum: T").Attr("T: {float, double}").Attr("use_nesterov: bool = false")
    .SetIsStateful().SetShapeFn(NoOutputs).Doc("PS-mode ResourceApplyMomentum.");
TFPS_PS_OP("PsApplyKerasMomentum")
    .Input("var: resource").Input("accum: resource").Input("lr: T").Input("grad: T")
    .Input("momentum: T").Attr("T: {float, double}").Attr("use_nesterov: bool = false")
    .SetIsStateful().SetShapeFn(NoOutputs).Doc("PS-mode ResourceApplyKerasMomentum.");
TFPS_PS_OP("PsApplyAdam")
    .Input("var: resource").Input("m: resource").Input("v: resource")
    .Input("beta1_power: T").Input("beta2_power: T").Input("lr: T").Input("beta1: T")
    .Input("beta2: T").Input("epsilon: T").Input("grad: T").Attr("T: {float, double}")
    .Attr("use_nesterov: bool = false").SetIsStateful().SetShapeFn(NoOutputs)
    .Doc("PS-mode ResourceApplyAdam.");
TFPS_PS_OP("PsApplyAdamWithAmsgrad")
    .Input("var: resource").Input("m: resource").Input("v: resource").Input("vhat: resource")
    .Input("beta1_power: T").Input("beta2_power: T").Input("lr: T").Input("beta1: T")
    .Input("beta2: T").Input("epsilon: T").Input("grad: T").Attr("T: {float, double}")
    .SetIsStateful().SetShapeFn(NoOutputs).Doc("PS-mode ResourceApplyAdamWithAmsgrad.");
TFPS_PS_OP("PsApplyAdagrad")
    .Input("var: resource").Input("accum: resource").Input("lr: T").Input("grad: T")
    .Attr("T: {float, double}").Attr("update_slots: bool = true").SetIsStateful()
    .SetShapeFn(NoOutputs).Doc("PS-mode ResourceApplyAdagrad.");
TFPS_PS_OP("PsApplyAdagradV2")
    .Input("var: resource").Input("accum: resource").Input("lr: T").Input("epsilon: T")
    .Input("grad: T").Attr("T: {float, double}").Attr("update_slots: bool = true")
    .SetIsStateful().SetShapeFn(NoOutputs).Doc("PS-mode ResourceApplyAdagradV2.");
TFPS_PS_OP("PsApplyKerasAdagrad")
    .Input("var: resource").Input("accum: resource").Input("lr: T").Input("epsilon: T")
    .Input("grad: T").Attr("T: {float, double}").SetIsStateful().SetShapeFn(NoOutputs)
    .Doc("PS-mode Keras 3 Adagrad: var -= lr * g / sqrt(accum + epsilon).");
TFPS_PS_OP("PsApplyRMSProp")
    .Input("var: resource").Input("ms: resource").Input("mom: resource").Input("lr: T")
    .Input("rho: T").Input("momentum: T").Input("epsilon: T").Input("grad: T")
    .Attr("T: {float, double}").SetIsStateful().SetShapeFn(NoOutputs)
    .Doc("PS-mode ResourceApplyRMSProp.");
TFPS_PS_OP("PsApplyCenteredRMSProp")
    .Input("var: resource").Input("mg: resource").Input("ms: resource").Input("mom: resource")
    .Input("lr: T").Input("rho: T").Input("momentum: T").Input("epsilon: T").Input("grad: T")
    .Attr("T: {float, double}").SetIsStateful().SetShapeFn(NoOutputs)
    .Doc("PS-mode ResourceApplyCenteredRMSProp.");

// ResourceSparseApplyXXX's inputs and attrs (T restricted to the server's float types).
#define TFPS_PS_SPARSE_OP(OP) \
  TFPS_PS_OP(OP).Attr("T: {float, double}").Attr("Tindices: {int32, int64}")

TFPS_PS_SPARSE_OP("PsSparseApplyGradientDescent")
    .Input("var: resource").Input("alpha: T").Input("grad: T").Input("indices: Tindices")
    .SetIsStateful().SetShapeFn(NoOutputs)
    .Doc("PS mode: var[indices] -= alpha * mean(grad rows over workers); no TF twin "
         "(Keras 3 SGD on IndexedSlices).");
TFPS_PS_SPARSE_OP("PsSparseApplyMomentum")
    .Input("var: resource").Input("accum: resource").Input("lr: T").Input("grad: T")
    .Input("indices: Tindices").Input("momentum: T").Attr("use_nesterov: bool = false")
    .SetIsStateful().SetShapeFn(NoOutputs).Doc("PS-mode ResourceSparseApplyMomentum.");
TFPS_PS_SPARSE_OP("PsSparseApplyKerasMomentum")
    .Input("var: resource").Input("accum: resource").Input("lr: T").Input("grad: T")
    .Input("indices: Tindices").Input("momentum: T").Attr("use_nesterov: bool = false")
    .SetIsStateful().SetShapeFn(NoOutputs).Doc("PS-mode ResourceSparseApplyKerasMomentum.");
TFPS_PS_SPARSE_OP("PsSparseApplyAdagrad")
    .Input("var: resource").Input("accum: resource").Input("lr: T").Input("grad: T")
    .Input("indices: Tindices").Attr("update_slots: bool = true").SetIsStateful()
    .SetShapeFn(NoOutputs).Doc("PS-mode ResourceSparseApplyAdagrad.");
TFPS_PS_SPARSE_OP("PsSparseApplyAdagradV2")
    .Input("var: resource").Input("accum: resource").Input("lr: T").Input("epsilon: T")
    .Input("grad: T").Input("indices: Tindices").Attr("update_slots: bool = true")
    .SetIsStateful().SetShapeFn(NoOutputs).Doc("PS-mode ResourceSparseApplyAdagradV2.");
TFPS_PS_SPARSE_OP("PsSparseApplyKerasAdagrad")
    .Input("var: resource").Input("accum: resource").Input("lr: T").Input("epsilon: T")
    .Input("grad: T").Input("indices: Tindices").SetIsStateful().SetShapeFn(NoOutputs)
    .Doc("PS-mode Keras 3 Adagrad on rows; no TF twin.");
TFPS_PS_SPARSE_OP("PsSparseApplyRMSProp")
    .Input("var: resource").Input("ms: resource").Input("mom: resource").Input("lr: T")
    .Input("rho: T").Input("momentum: T").Input("epsilon: T").Input("grad: T")
    .Input("indices: Tindices").SetIsStateful().SetShapeFn(NoOutputs)
    .Doc("PS-mode ResourceSparseApplyRMSProp.");
TFPS_PS_SPARSE_OP("PsSparseApplyCenteredRMSProp")
    .Input("var: resource").Input("mg: resource").Input("ms: resource").Input("mom: resource")
    .Input("lr: T").Input("rho: T").Input("momentum: T").Input("epsilon: T").Input("grad: T")
    .Input("indices: Tindices").SetIsStateful().SetShapeFn(NoOutputs)
    .Doc("PS-mode ResourceSparseApplyCenteredRMSProp.");

}  // namespace
}  // namespace tfps

#include "tf_ps_ops/kernels/ps_op_table.h"

namespace tfps {

namespace {

PsOpSpec Dense(const char* op, const char* twin, Optimizer optimizer,
               std::map<std::string, double> fixed = {}) {
  PsOpSpec s;
  s.op = op;
  s.twin = twin;
  s.optimizer = optimizer;
  s.fixed = std::move(fixed);
  return s;
}

PsOpSpec Sparse(PsOpSpec s) {
  s.op = "PsSparse" + s.op.substr(2);  // PsApplyX -> PsSparseApplyX
  s.twin = s.twin.empty() ? "" : "ResourceSparse" + s.twin.substr(8);  // ResourceApplyX -> ...
  s.sparse = true;
  return s;
}

PsOpSpec GradientDescent() {
  PsOpSpec s = Dense("PsApplyGradientDescent", "ResourceApplyGradientDescent",
                     Optimizer::kGradientDescent);
  s.inputs = {{"lr", "alpha"}};
  s.grad = "delta";
  return s;
}

// TF's Adagrad (v1) has no epsilon and multiplies by rsqrt(accum): epsilon 0 says so.
PsOpSpec AdagradV1() {
  return Dense("PsApplyAdagrad", "ResourceApplyAdagrad", Optimizer::kAdagrad, {{"epsilon", 0}});
}

}  // namespace

const std::vector<PsOpSpec>& PsOps() {
  static const auto* ops = [] {
    const PsOpSpec momentum = Dense("PsApplyMomentum", "ResourceApplyMomentum",
                                    Optimizer::kMomentum);
    const PsOpSpec keras_momentum = Dense("PsApplyKerasMomentum", "ResourceApplyKerasMomentum",
                                          Optimizer::kKerasMomentum);
    const PsOpSpec adagrad_v2 = Dense("PsApplyAdagradV2", "ResourceApplyAdagradV2",
                                      Optimizer::kAdagrad);
    // Keras 3's Adagrad (epsilon inside the square root) has no TF op.
    const PsOpSpec keras_adagrad = Dense("PsApplyKerasAdagrad", "", Optimizer::kKerasAdagrad);
    const PsOpSpec rms = Dense("PsApplyRMSProp", "ResourceApplyRMSProp", Optimizer::kRMSProp);
    const PsOpSpec centered = Dense("PsApplyCenteredRMSProp", "ResourceApplyCenteredRMSProp",
                                    Optimizer::kCenteredRMSProp);
    PsOpSpec sparse_sgd = Sparse(GradientDescent());
    sparse_sgd.twin = "";  // TF has no ResourceSparseApplyGradientDescent
    sparse_sgd.grad = "grad";
    return new std::vector<PsOpSpec>{
        GradientDescent(), momentum, keras_momentum,
        Dense("PsApplyAdam", "ResourceApplyAdam", Optimizer::kAdam, {{"amsgrad", 0}}),
        // ResourceApplyAdamWithAmsgrad has no use_nesterov attr.
        Dense("PsApplyAdamWithAmsgrad", "ResourceApplyAdamWithAmsgrad", Optimizer::kAdam,
              {{"amsgrad", 1}, {"use_nesterov", 0}}),
        AdagradV1(), adagrad_v2, keras_adagrad, rms, centered,
        sparse_sgd, Sparse(momentum), Sparse(keras_momentum), Sparse(AdagradV1()),
        Sparse(adagrad_v2), Sparse(keras_adagrad), Sparse(rms), Sparse(centered),
    };
  }();
  return *ops;
}

const PsOpSpec* FindPsOp(const std::string& op) {
  for (const PsOpSpec& spec : PsOps()) {
    if (spec.op == op) return &spec;
  }
  return nullptr;
}

std::vector<std::pair<std::string, std::string>> PsSwaps() {
  std::vector<std::pair<std::string, std::string>> swaps;
  for (const PsOpSpec& spec : PsOps()) {
    if (!spec.twin.empty()) swaps.emplace_back(spec.twin, spec.op);
  }
  return swaps;
}

std::string PsKeyOfInput(const std::string& input) {
  std::string source = !input.empty() && input[0] == '^' ? input.substr(1) : input;
  return kPsKeyPrefix + source.substr(0, source.find(':'));
}

}  // namespace tfps

#include "tf_ps_ops/cc/wire/optimizer_spec.h"

namespace tfps {

const std::vector<OptimizerSpec>& OptimizerSpecs() {
  // The wire order of each row is part of the protocol: appending is fine with a version
  // bump, reordering is not.
  static const auto* specs = new std::vector<OptimizerSpec>{
      {Optimizer::kGradientDescent, "GradientDescent", {"lr"}, {}},
      {Optimizer::kMomentum, "Momentum", {"lr", "momentum", "use_nesterov"}, {"accum"}},
      {Optimizer::kKerasMomentum, "KerasMomentum", {"lr", "momentum", "use_nesterov"},
       {"accum"}},
      {Optimizer::kAdam, "Adam",
       {"lr", "beta1", "beta2", "epsilon", "beta1_power", "beta2_power", "use_nesterov",
        "amsgrad"},
       {"m", "v", "vhat"}},
      {Optimizer::kAdagrad, "Adagrad", {"lr", "epsilon", "update_slots"}, {"accum"}},
      {Optimizer::kRMSProp, "RMSProp", {"lr", "rho", "momentum", "epsilon"}, {"ms", "mom"}},
      {Optimizer::kCenteredRMSProp, "CenteredRMSProp", {"lr", "rho", "momentum", "epsilon"},
       {"mg", "ms", "mom"}},
      {Optimizer::kKerasAdagrad, "KerasAdagrad", {"lr", "epsilon"}, {"accum"}},
  };
  return *specs;
}

const OptimizerSpec* FindOptimizerSpec(Optimizer optimizer) {
  for (const OptimizerSpec& spec : OptimizerSpecs()) {
    if (spec.optimizer == optimizer) return &spec;
  }
  return nullptr;
}

int ParamIndex(Optimizer optimizer, const std::string& name) {
  const OptimizerSpec* spec = FindOptimizerSpec(optimizer);
  if (spec == nullptr) return -1;
  for (size_t i = 0; i < spec->params.size(); ++i) {
    if (spec->params[i] == name) return static_cast<int>(i);
  }
  return -1;
}

int OptimizerParamCount(Optimizer optimizer) {
  const OptimizerSpec* spec = FindOptimizerSpec(optimizer);
  return spec == nullptr ? 0 : static_cast<int>(spec->params.size());
}

int OptimizerSlotCount(Optimizer optimizer) {
  const OptimizerSpec* spec = FindOptimizerSpec(optimizer);
  return spec == nullptr ? 0 : static_cast<int>(spec->slots.size());
}

const char* OptimizerName(Optimizer optimizer) {
  const OptimizerSpec* spec = FindOptimizerSpec(optimizer);
  return spec == nullptr ? "none" : spec->name;
}

}  // namespace tfps

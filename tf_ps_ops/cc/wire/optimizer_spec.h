// The server-side optimizers of PS mode, described once: each one's name, its
// hyperparameters in the order they travel on the wire, and its slots in the order the
// server keeps them. The kernels marshal by this table, the server's optimizers read their
// fields by these names, the message checks count by it, and Python reads it through the
// op library (tf_ps_ops/kernels/c_api.h).
#ifndef TFPS_CC_WIRE_OPTIMIZER_SPEC_H_
#define TFPS_CC_WIRE_OPTIMIZER_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tfps {

// The value of Header::optimizer. Semantics are TensorFlow's ResourceApplyXXX ones
// (ps_server/optimizers.cc); the hyperparameters travel with every push, so schedules work.
enum class Optimizer : uint8_t {
  kNone = 0,
  kGradientDescent = 1,
  kMomentum = 2,
  kKerasMomentum = 3,
  kAdam = 4,
  kAdagrad = 5,
  kRMSProp = 6,
  kCenteredRMSProp = 7,
  kKerasAdagrad = 8,  // Keras 3: epsilon inside the square root
};
constexpr uint8_t kMaxOptimizer = 8;

struct OptimizerSpec {
  Optimizer optimizer;
  const char* name;
  // Hyperparameters in wire order; booleans travel as 0.0 / 1.0.
  std::vector<std::string> params;
  // Slot tensors (the parameter's shape) in the server's order. A push carries their
  // initial values after the hyperparameters; the server creates the slots with them.
  std::vector<std::string> slots;
};

// Every optimizer but kNone, in enum order.
const std::vector<OptimizerSpec>& OptimizerSpecs();
// nullptr for kNone and values out of range (from the network: check before use).
const OptimizerSpec* FindOptimizerSpec(Optimizer optimizer);

// Position of hyperparameter `name` in the optimizer's wire order, or -1.
int ParamIndex(Optimizer optimizer, const std::string& name);

int OptimizerParamCount(Optimizer optimizer);  // 0 for kNone
int OptimizerSlotCount(Optimizer optimizer);   // 0 for kNone
const char* OptimizerName(Optimizer optimizer);  // "none" for kNone

}  // namespace tfps

#endif  // TFPS_CC_WIRE_OPTIMIZER_SPEC_H_

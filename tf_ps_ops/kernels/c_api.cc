// The kernels layer's C functions (declared, for the compiler and for Python, in c_api.h).
#include "tf_ps_ops/kernels/c_api.h"

#include <string>

#include "tf_ps_ops/cc/wire/optimizer_spec.h"
#include "tf_ps_ops/kernels/ps_op_table.h"

extern "C" {

const char* tfps_ps_swap_table(void) {
  static const std::string* table = [] {
    auto* text = new std::string;
    for (const auto& swap : tfps::PsSwaps()) *text += swap.first + " " + swap.second + "\n";
    return text;
  }();
  return table->c_str();
}

const char* tfps_ps_key_prefix(void) { return tfps::kPsKeyPrefix; }

int tfps_ps_optimizer_slots(int optimizer) {
  if (optimizer < 0 || optimizer > tfps::kMaxOptimizer) return 0;
  return tfps::OptimizerSlotCount(static_cast<tfps::Optimizer>(optimizer));
}

}  // extern "C"

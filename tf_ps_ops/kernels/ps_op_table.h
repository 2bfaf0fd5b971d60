// The PS-mode ops, described once: each PsApplyXXX / PsSparseApplyXXX op, the optimizer the
// servers run for it, where its hyperparameters come from, and the TensorFlow op it
// replaces. The kernels marshal by it (ps_variable.cc), the Grappler rewrite and Python's
// rewrite (through c_api.h) swap by it. No TensorFlow headers: it is a table of names.
#ifndef TFPS_KERNELS_PS_OP_TABLE_H_
#define TFPS_KERNELS_PS_OP_TABLE_H_

#include <map>
#include <string>
#include <vector>

#include "tf_ps_ops/cc/wire/optimizer_spec.h"

namespace tfps {

// Every PsApply op's key is kPsKeyPrefix + the variable's name unless `tensor_name` says
// otherwise; Python reads the prefix from here too (c_api.h).
constexpr char kPsKeyPrefix[] = "ps:";

struct PsOpSpec {
  std::string op;    // our op, e.g. "PsApplyMomentum"
  std::string twin;  // the TensorFlow op it replaces 1:1 ("" when TF has none)
  Optimizer optimizer = Optimizer::kNone;
  bool sparse = false;  // grad holds rows, `indices` their ids
  std::string grad = "grad";
  // How the op provides each of the optimizer's hyperparameters (optimizer_spec.h), in
  // this order: an input named in `inputs` (wire name -> input name), else a scalar input
  // of the wire name, else a bool attr of that name, else a constant from `fixed`.
  std::map<std::string, std::string> inputs;
  std::map<std::string, double> fixed;
  // Slots the op has no resource input for start at 0 on the servers (Adam's vhat when the
  // op is not the AMSGrad one: never read then).
};

const std::vector<PsOpSpec>& PsOps();
const PsOpSpec* FindPsOp(const std::string& op);

// The rewrite's table: (TensorFlow op, our op) for every op with a twin.
std::vector<std::pair<std::string, std::string>> PsSwaps();

// The key of a variable fed from node input `input` ("^w", "w:0", "w" -> "ps:w").
std::string PsKeyOfInput(const std::string& input);

}  // namespace tfps

#endif  // TFPS_KERNELS_PS_OP_TABLE_H_

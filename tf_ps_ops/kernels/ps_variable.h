// PS mode's handling of a TF resource variable, for the PsApply and PsInitVariable kernels:
// its key, the initialisation protocol, the hyperparameters and slot values a push carries
// (marshalled by ps_op_table.h and optimizer_spec.h), and writing the servers' answer back.
//
// Initialisation: PsInitVariable (or, failing that, the first PsApply of a variable) sends
// rank 0's value to the servers and every rank adopts the servers' value, so replicas start
// equal (InitVariable, ps_apply_ops.cc). The local slot variables (accum, m, v, ...) are only
// read for their initial value, which travels with each push: in PS mode the slots live on
// the servers.
#ifndef TFPS_KERNELS_PS_VARIABLE_H_
#define TFPS_KERNELS_PS_VARIABLE_H_

#include <functional>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_var.h"
#include "tf_ps_ops/cc/engine/sparse_rows.h"
#include "tf_ps_ops/kernels/ps_op_table.h"

namespace tfps {

// The servers' key of the variable at input 0: `tensor_name`, or by default "ps:" + its
// shared name.
std::string PsKey(tensorflow::OpKernelContext* ctx, const std::string& tensor_name);

// Whether this process has yet to initialise `key` on the servers; marks it initialised.
bool ClaimInitialisation(const std::string& key);
// Marks `key` initialised (PsInitVariable does it before its own push).
void MarkInitialised(const std::string& key);
// Forgets that `key` was initialised, so the next call initialises again (after a failure).
void ForgetInitialisation(const std::string& key);

// The variable's current value (on its device), or FailedPrecondition "variable '<key>'
// <missing>" when it holds none yet.
absl::Status ReadValue(tensorflow::Var* var, const std::string& key, const std::string& missing,
                       tensorflow::Tensor* value);

// Where a PsApply op finds each value a push carries, resolved once per kernel.
class PsMarshal {
 public:
  // Fails (naming the op and the value) when the op provides some hyperparameter of its
  // optimizer neither as an input, an attr nor a constant of the op table.
  absl::Status Init(tensorflow::OpKernelConstruction* ctx, const tensorflow::OpKernel& kernel,
                    const PsOpSpec& spec);
  // Reads a slot's first element. The default reads host memory; the GPU kernels pass one
  // that copies it from the device (ps_apply_ops.cc, ReadSlots).
  using SlotReader = std::function<absl::Status(const std::string& slot,
                                                const tensorflow::Tensor& value, double* out)>;
  // The hyperparameters in wire order, then the slots' initial values.
  absl::Status Collect(tensorflow::OpKernelContext* ctx, const std::string& key,
                       std::vector<double>* params, const SlotReader& read_slot = nullptr) const;

 private:
  struct Source {
    std::string name;   // the optimizer's name for it
    std::string arg;    // the op's input name for it
    int input = -1;     // scalar input (hyperparameter) or resource input (slot)
    double value = 0;   // when input < 0: the attr's or constant's value (0 for a slot)
  };
  absl::Status SlotInitialValue(tensorflow::OpKernelContext* ctx, const Source& slot,
                                const std::string& key, const SlotReader& read_slot,
                                double* value) const;

  const OptimizerSpec* optimizer_ = nullptr;
  std::vector<Source> params_;
  std::vector<Source> slots_;
};

// Writes the servers' answer into the variable: the new buffer replaces the old one under
// the variable's lock (no copy; readers holding the old buffer keep it).
void StoreDense(tensorflow::Var* var, const tensorflow::Tensor& fresh);

// Writes answered rows into the variable in place, under its lock, as TF's own sparse
// updates do: a buffer that readers still hold is copied first, and the variable goes
// into copy-on-read mode (dense reads copy, rows are written in place from then on).
void StoreRows(tensorflow::Var* var, const SparseRows& rows);

// Checks a sparse gradient against its variable and merges its duplicate rows.
Status ToUniqueRows(const tensorflow::Tensor& var, const tensorflow::Tensor& grad,
                    const tensorflow::Tensor& indices, SparseRows* out);

}  // namespace tfps

#endif  // TFPS_KERNELS_PS_VARIABLE_H_

// Server-side optimizers for PS mode: the same math, hyperparameters and slots as
// TensorFlow's ResourceApplyXXX kernels, applied to one partition of a parameter.
#ifndef TFPS_PS_SERVER_OPTIMIZERS_H_
#define TFPS_PS_SERVER_OPTIMIZERS_H_

#include <cstdint>
#include <vector>

#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

// var -= update(grad_sum / num_workers) in place, reading and writing `slots`.
// dtype is float32 or float64; `params` holds the optimizer's hyperparameters in the order
// of optimizer_spec.h's table (extra values after them are ignored).
Status ApplyOptimizer(Optimizer optimizer, const std::vector<double>& params, DType dtype,
                      void* var, std::vector<std::vector<char>>* slots, const void* grad_sum,
                      uint64_t count, int num_workers);

// The same update on `num_rows` rows only (sparse): row `rows[i]` (of `row_elems` elements,
// an index into `var` and the slots) gets the gradient sum at `row_sums + i * row_elems`.
// Each element sees exactly the arithmetic of the dense update above.
Status ApplyOptimizerRows(Optimizer optimizer, const std::vector<double>& params, DType dtype,
                          void* var, std::vector<std::vector<char>>* slots, const void* row_sums,
                          const int64_t* rows, uint64_t num_rows, uint64_t row_elems,
                          int num_workers);

}  // namespace tfps

#endif  // TFPS_PS_SERVER_OPTIMIZERS_H_

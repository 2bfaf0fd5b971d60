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
// dtype is float32 or float64; `params` holds OptimizerParamCount(optimizer) values.
Status ApplyOptimizer(Optimizer optimizer, const std::vector<double>& params, DType dtype,
                      void* var, std::vector<std::vector<char>>* slots, const void* grad_sum,
                      uint64_t count, int num_workers);

}  // namespace tfps

#endif  // TFPS_PS_SERVER_OPTIMIZERS_H_

// CUDA runtime errors as Status values, for the CUDA sources only (CUDA builds; docs/gpu.md).
#ifndef TFPS_CC_COMMON_CUDA_STATUS_H_
#define TFPS_CC_COMMON_CUDA_STATUS_H_

#include <cuda_runtime.h>

#include <string>

#include "tf_ps_ops/cc/common/status.h"

namespace tfps {

// `what` names the step ("int8 encode of 4096 elements"); the message says what to check.
inline Status CudaStatus(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status::Ok();
  std::string hint;
  if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice) {
    hint = " (this library's CUDA runtime needs a driver of its CUDA version or newer: "
           "nvidia-smi shows the driver's)";
  } else if (err == cudaErrorNoKernelImageForDevice) {
    hint = " (no code for this GPU: rebuild for its compute capability, docs/gpu.md)";
  }
  return Internal(what + ": CUDA error " + cudaGetErrorName(err) + ": " +
                  cudaGetErrorString(err) + hint);
}

#define TFPS_CUDA_RETURN_IF_ERROR(expr, what)                         \
  do {                                                                \
    ::tfps::Status _tfps_cs = ::tfps::CudaStatus((expr), (what));     \
    if (!_tfps_cs.ok()) return _tfps_cs;                              \
  } while (0)

}  // namespace tfps

#endif  // TFPS_CC_COMMON_CUDA_STATUS_H_

// A measurement of gradient staging overlap with raw CUDA, the pattern the GPU kernels get
// from TensorFlow's device context (docs/gpu.md): a backward pass of `layers` kernels on a
// compute stream, each producing one gradient; each gradient copied to pinned host memory
// on a second stream as soon as its kernel is done (an event recorded on the compute stream,
// waited on by the staging stream: the compute stream never waits). Timed with CUDA events:
//   compute_ms    the kernels alone
//   copy_ms       the copies alone
//   serial_ms     kernels and copies on one stream, one after the other (no overlap)
//   overlapped_ms kernels on one stream, copies on the other, event-ordered
// With full overlap, overlapped_ms is near max(compute_ms, copy_ms) + one layer's copy.
#ifndef TFPS_CC_GPU_STAGING_PROBE_H_
#define TFPS_CC_GPU_STAGING_PROBE_H_

#include <cstdint>

#include "tf_ps_ops/cc/common/status.h"

namespace tfps {
namespace gpu {

Status StagingOverlapProbe(uint64_t bytes_per_layer, int layers, int compute_iters,
                           double* compute_ms, double* copy_ms, double* serial_ms,
                           double* overlapped_ms);

}  // namespace gpu
}  // namespace tfps

#endif  // TFPS_CC_GPU_STAGING_PROBE_H_

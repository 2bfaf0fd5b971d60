// The SFB rebuild on the GPU: G = (sum over all factor rows k, in rank order, of
// v_k^T u_k) / divisor, the same arithmetic as sfb/kernels/rebuild.h (read its comment), on
// device memory, queued on a CUDA stream. CUDA builds only (docs/gpu.md).
//
// Bit-identical to the CPU rebuild, and so to every CPU replica: one thread owns one element
// G[n][m] and adds the products v[k][n]*u[k][m] for k = 0, 1, ... in order, each product
// rounded before the add (__fmul_rn, __fadd_rn; -fmad=false), then divides once
// (__fdiv_rn). Threads and tiles split the elements, never one element's chain. cuBLAS is
// not used: its GEMMs pick their own summation order (split-K, blocking, per GPU model), so
// a GPU replica would drift from a CPU one by rounding — the one thing SFB may not do.
#ifndef TFPS_CC_GPU_SFB_REBUILD_H_
#define TFPS_CC_GPU_SFB_REBUILD_H_

#include <cstdint>

#include "tf_ps_ops/cc/common/status.h"

namespace tfps {
namespace gpu {

// `rows`: ktot device rows of [u (m values) | v (n values)], every worker's rows in rank
// order (the gathered messages, concatenated). `g`: n x m device output, row-major.
// `stream`: a cudaStream_t. Returns at once; the work is queued.
Status SfbRebuild(const float* rows, int64_t ktot, int64_t m, int64_t n, float divisor,
                  float* g, void* stream);
Status SfbRebuild(const double* rows, int64_t ktot, int64_t m, int64_t n, double divisor,
                  double* g, void* stream);

}  // namespace gpu
}  // namespace tfps

#endif  // TFPS_CC_GPU_SFB_REBUILD_H_

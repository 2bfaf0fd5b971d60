// sfb_rebuild.h's kernel. Tiles of 32 columns (m) x 8 rows (n) of G per block; the block
// stages 32 factor rows of u and v in shared memory at a time, and every thread walks k in
// order for its own element.
#include <string>

#include "tf_ps_ops/cc/common/cuda_status.h"
#include "tf_ps_ops/cc/gpu/sfb_rebuild.h"

namespace tfps {
namespace gpu {
namespace {

constexpr int kTileM = 32, kTileN = 8, kTileK = 32;

__device__ __forceinline__ float Add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double Add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float Mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double Mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float Div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double Div(double a, double b) { return __ddiv_rn(a, b); }

template <typename T>
__global__ void RebuildKernel(const T* rows, int64_t ktot, int64_t m, int64_t n, T divisor,
                              T* g) {
  __shared__ T u_tile[kTileK][kTileM];
  __shared__ T v_tile[kTileK][kTileN];
  const int64_t col = blockIdx.x * int64_t{kTileM} + threadIdx.x;
  const int64_t row = blockIdx.y * int64_t{kTileN} + threadIdx.y;
  const int64_t width = m + n;
  const int tid = threadIdx.y * kTileM + threadIdx.x;  // 0..255
  T acc = T(0);
  for (int64_t k0 = 0; k0 < ktot; k0 += kTileK) {
    // 256 threads load 32x32 of u and 32x8 of v (zeros past the edges).
    for (int i = tid; i < kTileK * kTileM; i += kTileM * kTileN) {
      const int kk = i / kTileM, mm = i % kTileM;
      const int64_t k = k0 + kk, c = blockIdx.x * int64_t{kTileM} + mm;
      u_tile[kk][mm] = (k < ktot && c < m) ? rows[k * width + c] : T(0);
    }
    for (int i = tid; i < kTileK * kTileN; i += kTileM * kTileN) {
      const int kk = i / kTileN, nn = i % kTileN;
      const int64_t k = k0 + kk, r = blockIdx.y * int64_t{kTileN} + nn;
      v_tile[kk][nn] = (k < ktot && r < n) ? rows[k * width + m + r] : T(0);
    }
    __syncthreads();
    const int steps = static_cast<int>(ktot - k0 < kTileK ? ktot - k0 : kTileK);
    // The CPU: acc = acc + u[k][m] * v[k][n] (rebuild.cc's a0 + u0 * x), k ascending.
    for (int kk = 0; kk < steps; ++kk) {
      acc = Add(acc, Mul(u_tile[kk][threadIdx.x], v_tile[kk][threadIdx.y]));
    }
    __syncthreads();
  }
  if (row < n && col < m) g[row * m + col] = divisor != T(1) ? Div(acc, divisor) : acc;
}

template <typename T>
Status Launch(const T* rows, int64_t ktot, int64_t m, int64_t n, T divisor, T* g,
              void* stream) {
  if (m <= 0 || n <= 0) return Status::Ok();
  const int64_t blocks_m = (m + kTileM - 1) / kTileM, blocks_n = (n + kTileN - 1) / kTileN;
  if (blocks_n > 65535 || blocks_m > 0x7fffffff) {
    return InvalidArgument("SFB rebuild on the GPU: a " + std::to_string(n) + " x " +
                           std::to_string(m) + " gradient has too many rows (at most " +
                           std::to_string(65535 * kTileN) + ")");
  }
  const dim3 grid(static_cast<unsigned>(blocks_m), static_cast<unsigned>(blocks_n));
  const dim3 block(kTileM, kTileN);
  RebuildKernel<T><<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(rows, ktot, m, n,
                                                                          divisor, g);
  return CudaStatus(cudaGetLastError(), "SFB rebuild of a " + std::to_string(n) + " x " +
                                            std::to_string(m) + " gradient on the GPU");
}

}  // namespace

Status SfbRebuild(const float* rows, int64_t ktot, int64_t m, int64_t n, float divisor,
                  float* g, void* stream) {
  return Launch(rows, ktot, m, n, divisor, g, stream);
}

Status SfbRebuild(const double* rows, int64_t ktot, int64_t m, int64_t n, double divisor,
                  double* g, void* stream) {
  return Launch(rows, ktot, m, n, divisor, g, stream);
}

}  // namespace gpu
}  // namespace tfps

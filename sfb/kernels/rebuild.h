// Rebuilding a fully-connected layer's weight gradient from every worker's sufficient
// factors: G = sum over workers p, in rank order, of v_p^T * u_p (N x M), where u_p = dy
// (K_p x M) and v_p = x (K_p x N). No TensorFlow here: the kernel (sfb_ops.cc) adapts.
//
// Replicas must compute bit-identical G, so the arithmetic is pinned down here rather than
// left to a BLAS whose blocking (and thread split) picks the summation order:
//   G[n][m] = (((0 + v[0][n]*u[0][m]) + v[1][n]*u[1][m]) + ...) / divisor
// over the factor rows k of all workers concatenated in rank order, each product rounded
// before the add (no fused multiply-add). Threads split rows n and vector lanes split
// columns m; neither changes any element's sequence of operations, so the result does not
// depend on the thread count, on the CPU's vector width, nor on which worker computes it.
// It equals NumPy's float32 `G = G + np.outer(v[k], u[k])` loop bit for bit.
#ifndef TFPS_SFB_KERNELS_REBUILD_H_
#define TFPS_SFB_KERNELS_REBUILD_H_

#include <cstdint>
#include <vector>

namespace tfps {
namespace sfb {

// Columns m are processed in strips of this many bytes (4 vectors of 256 bits).
constexpr int64_t kStripBytes = 128;

template <typename T>
constexpr int64_t StripWidth() { return kStripBytes / static_cast<int64_t>(sizeof(T)); }

// The factors of all workers, repacked for the accumulation loop:
//   u_strips: [num_strips][ktot][StripWidth] (columns past M are zero),
//   vt:       [N][ktot] (v transposed).
template <typename T>
struct PackedFactors {
  int64_t m = 0, n = 0, ktot = 0;
  std::vector<T> u_strips;
  std::vector<T> vt;

  int64_t num_strips() const { return (m + StripWidth<T>() - 1) / StripWidth<T>(); }
};

// Sizes `packed` for `ktot` rows of an M-column u and an N-column v, zero-filled.
template <typename T>
void ResizePacked(int64_t m, int64_t n, int64_t ktot, PackedFactors<T>* packed);

// Copies `rows` factor rows, each laid out as [u (M values) | v (N values)], into the
// packed form at row offset `row0`. Call once per worker, in rank order.
template <typename T>
void PackRows(const T* rows, int64_t count, int64_t row0, PackedFactors<T>* packed);

// Writes rows [row_begin, row_end) of G (N x M, row-major) from the packed factors, each
// element divided by `divisor` at the end. Thread-safe for disjoint row ranges.
void RebuildRows(const PackedFactors<float>& packed, float divisor, int64_t row_begin,
                 int64_t row_end, float* g);
void RebuildRows(const PackedFactors<double>& packed, double divisor, int64_t row_begin,
                 int64_t row_end, double* g);

}  // namespace sfb
}  // namespace tfps

#endif  // TFPS_SFB_KERNELS_REBUILD_H_

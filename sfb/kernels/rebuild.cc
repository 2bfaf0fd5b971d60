// The arithmetic of rebuild.h. Bit-identical replicas hinge on two things here:
//  - every G element is one chain of adds over k in order, whatever the thread split;
//  - a product is rounded before it is added. GCC fuses a*b+c into an FMA whenever the
//    target has one (-ffp-contract=fast is its default), and a replica built or dispatched
//    for another CPU would then round differently. Contraction is switched off for this
//    file (so the AVX-512 function, whose target has FMA, emits none either), and the
//    AVX2 clone is AVX2 without FMA. SSE2, AVX2 and AVX-512 paths agree bit for bit.
#pragma GCC optimize("fp-contract=off")

#include "sfb/kernels/rebuild.h"

#include <algorithm>
#include <cstring>

namespace tfps {
namespace sfb {
namespace {

// 256-bit vectors; on the baseline x86-64 target GCC lowers each to two SSE registers.
template <typename T> struct Vec;
template <> struct Vec<float> { typedef float type __attribute__((vector_size(32))); };
template <> struct Vec<double> { typedef double type __attribute__((vector_size(32))); };
template <typename T> struct Vec512;
template <> struct Vec512<float> { typedef float type __attribute__((vector_size(64))); };
template <> struct Vec512<double> { typedef double type __attribute__((vector_size(64))); };

// Loads through a pointer: a vector return value would change the ABI (-Wpsabi).
template <typename T, typename V>
inline __attribute__((always_inline)) void Load(const T* p, V* v) {
  std::memcpy(v, p, sizeof(V));
}

// One strip (kStripBytes of columns: four vectors) of kRows (1 or 2) consecutive rows of G,
// accumulated in registers over all k. `cols` < StripWidth only in the last strip. The
// accumulators are named variables, not an array, so that GCC keeps them in registers.
template <typename T, int kRows>
inline __attribute__((always_inline)) void StripRows(const T* u_strip, const T* vt_rows,
                                                     int64_t ktot, T divisor, T* g_rows,
                                                     int64_t ldg, int64_t cols) {
  using V = typename Vec<T>::type;
  constexpr int64_t kLanes = sizeof(V) / sizeof(T);
  static_assert(4 * sizeof(V) == kStripBytes, "a strip is four vectors");
  V a0{}, a1{}, a2{}, a3{}, b0{}, b1{}, b2{}, b3{};
  const T* v0 = vt_rows;
  const T* v1 = vt_rows + (kRows == 2 ? ktot : 0);
  for (int64_t k = 0; k < ktot; ++k) {
    const T* u = u_strip + k * StripWidth<T>();
    V u0, u1, u2, u3;
    Load(u, &u0);
    Load(u + kLanes, &u1);
    Load(u + 2 * kLanes, &u2);
    Load(u + 3 * kLanes, &u3);
    const T x = v0[k];
    a0 = a0 + u0 * x;
    a1 = a1 + u1 * x;
    a2 = a2 + u2 * x;
    a3 = a3 + u3 * x;
    if (kRows == 2) {
      const T y = v1[k];
      b0 = b0 + u0 * y;
      b1 = b1 + u1 * y;
      b2 = b2 + u2 * y;
      b3 = b3 + u3 * y;
    }
  }
  for (int r = 0; r < kRows; ++r) {
    V out[4] = {r == 0 ? a0 : b0, r == 0 ? a1 : b1, r == 0 ? a2 : b2, r == 0 ? a3 : b3};
    if (divisor != T(1)) {
      for (V& o : out) o = o / divisor;
    }
    std::memcpy(g_rows + r * ldg, out, cols * sizeof(T));
  }
}

// The same sums with 512-bit vectors: a strip is two of them, and four rows share each
// load of u. Only the AVX-512 function below uses it.
template <typename T, int kRows>
inline __attribute__((always_inline)) void StripRows512(const T* u_strip, const T* vt_rows,
                                                        int64_t ktot, T divisor, T* g_rows,
                                                        int64_t ldg, int64_t cols) {
  using V = typename Vec512<T>::type;
  constexpr int64_t kLanes = sizeof(V) / sizeof(T);
  static_assert(2 * sizeof(V) == kStripBytes, "a strip is two vectors");
  V a0{}, a1{}, b0{}, b1{}, c0{}, c1{}, d0{}, d1{};
  const T* v0 = vt_rows;
  const T* v1 = vt_rows + (kRows > 1 ? ktot : 0);
  const T* v2 = vt_rows + (kRows > 2 ? 2 * ktot : 0);
  const T* v3 = vt_rows + (kRows > 3 ? 3 * ktot : 0);
  for (int64_t k = 0; k < ktot; ++k) {
    const T* u = u_strip + k * StripWidth<T>();
    V u0, u1;
    Load(u, &u0);
    Load(u + kLanes, &u1);
    a0 = a0 + u0 * v0[k];
    a1 = a1 + u1 * v0[k];
    if (kRows > 1) {
      b0 = b0 + u0 * v1[k];
      b1 = b1 + u1 * v1[k];
    }
    if (kRows > 2) {
      c0 = c0 + u0 * v2[k];
      c1 = c1 + u1 * v2[k];
    }
    if (kRows > 3) {
      d0 = d0 + u0 * v3[k];
      d1 = d1 + u1 * v3[k];
    }
  }
  const V rows[4][2] = {{a0, a1}, {b0, b1}, {c0, c1}, {d0, d1}};
  for (int r = 0; r < kRows; ++r) {
    V out[2] = {rows[r][0], rows[r][1]};
    if (divisor != T(1)) {
      for (V& o : out) o = o / divisor;
    }
    std::memcpy(g_rows + r * ldg, out, cols * sizeof(T));
  }
}

// Rows [row_begin, row_end) of G, kernel-shaped by kWide (AVX-512: four rows of two
// 512-bit vectors; otherwise two rows of four 256-bit ones).
template <typename T, bool kWide>
inline __attribute__((always_inline)) void RebuildRowsImpl(const PackedFactors<T>& p,
                                                           T divisor, int64_t row_begin,
                                                           int64_t row_end, T* g) {
  constexpr int64_t kWidth = StripWidth<T>();
  constexpr int64_t kRows = kWide ? 4 : 2;
  // A block of rows shares each strip of u while it sits in L1; G is written row-block by
  // row-block so few pages are touched at a time.
  constexpr int64_t kRowBlock = 64;
  const int64_t strips = p.num_strips();
  for (int64_t n0 = row_begin; n0 < row_end; n0 += kRowBlock) {
    const int64_t n1 = std::min(row_end, n0 + kRowBlock);
    for (int64_t s = 0; s < strips; ++s) {
      const T* u_strip = p.u_strips.data() + s * p.ktot * kWidth;
      const int64_t cols = std::min(kWidth, p.m - s * kWidth);
      auto args = [&](int64_t n) { return std::make_pair(p.vt.data() + n * p.ktot,
                                                         g + n * p.m + s * kWidth); };
      int64_t n = n0;
      for (; n + kRows <= n1; n += kRows) {
        auto [vt, out] = args(n);
        if (kWide) {
          StripRows512<T, 4>(u_strip, vt, p.ktot, divisor, out, p.m, cols);
        } else {
          StripRows<T, 2>(u_strip, vt, p.ktot, divisor, out, p.m, cols);
        }
      }
      for (; n < n1; ++n) {  // the rows left over: one at a time
        auto [vt, out] = args(n);
        if (kWide) {
          StripRows512<T, 1>(u_strip, vt, p.ktot, divisor, out, p.m, cols);
        } else {
          StripRows<T, 1>(u_strip, vt, p.ktot, divisor, out, p.m, cols);
        }
      }
    }
  }
}

// AVX2 without FMA gives the same roundings as the baseline clone, only wider; AVX-512
// (checked at run time) the same again, with fp-contract off keeping its FMAs out.
__attribute__((target_clones("avx2", "default"))) void RebuildRowsFloat(
    const PackedFactors<float>& p, float divisor, int64_t row_begin, int64_t row_end,
    float* g) {
  RebuildRowsImpl<float, false>(p, divisor, row_begin, row_end, g);
}

__attribute__((target_clones("avx2", "default"))) void RebuildRowsDouble(
    const PackedFactors<double>& p, double divisor, int64_t row_begin, int64_t row_end,
    double* g) {
  RebuildRowsImpl<double, false>(p, divisor, row_begin, row_end, g);
}

__attribute__((target("avx512f"))) void RebuildRowsFloat512(
    const PackedFactors<float>& p, float divisor, int64_t row_begin, int64_t row_end,
    float* g) {
  RebuildRowsImpl<float, true>(p, divisor, row_begin, row_end, g);
}

__attribute__((target("avx512f"))) void RebuildRowsDouble512(
    const PackedFactors<double>& p, double divisor, int64_t row_begin, int64_t row_end,
    double* g) {
  RebuildRowsImpl<double, true>(p, divisor, row_begin, row_end, g);
}

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

}  // namespace

template <typename T>
void ResizePacked(int64_t m, int64_t n, int64_t ktot, PackedFactors<T>* packed) {
  packed->m = m;
  packed->n = n;
  packed->ktot = ktot;
  packed->u_strips.assign(packed->num_strips() * ktot * StripWidth<T>(), T(0));
  packed->vt.assign(n * ktot, T(0));
}

template <typename T>
void PackRows(const T* rows, int64_t count, int64_t row0, PackedFactors<T>* p) {
  constexpr int64_t kWidth = StripWidth<T>();
  const int64_t width = p->m + p->n, strips = p->num_strips();
  for (int64_t k = 0; k < count; ++k) {
    const T* row = rows + k * width;
    const int64_t kk = row0 + k;
    for (int64_t s = 0; s < strips; ++s) {
      const int64_t cols = std::min(kWidth, p->m - s * kWidth);
      std::memcpy(&p->u_strips[(s * p->ktot + kk) * kWidth], row + s * kWidth,
                  cols * sizeof(T));
    }
    const T* v = row + p->m;
    for (int64_t j = 0; j < p->n; ++j) p->vt[j * p->ktot + kk] = v[j];
  }
}

void RebuildRows(const PackedFactors<float>& packed, float divisor, int64_t row_begin,
                 int64_t row_end, float* g) {
  if (HasAvx512()) return RebuildRowsFloat512(packed, divisor, row_begin, row_end, g);
  RebuildRowsFloat(packed, divisor, row_begin, row_end, g);
}

void RebuildRows(const PackedFactors<double>& packed, double divisor, int64_t row_begin,
                 int64_t row_end, double* g) {
  if (HasAvx512()) return RebuildRowsDouble512(packed, divisor, row_begin, row_end, g);
  RebuildRowsDouble(packed, divisor, row_begin, row_end, g);
}

template void ResizePacked<float>(int64_t, int64_t, int64_t, PackedFactors<float>*);
template void ResizePacked<double>(int64_t, int64_t, int64_t, PackedFactors<double>*);
template void PackRows<float>(const float*, int64_t, int64_t, PackedFactors<float>*);
template void PackRows<double>(const double*, int64_t, int64_t, PackedFactors<double>*);

}  // namespace sfb
}  // namespace tfps

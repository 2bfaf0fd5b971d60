// The codecs' per-element and per-chunk math, written once for the GPU kernels
// (codec_gpu.cu.cc, compiled by nvcc: __host__ __device__) and the host
// (codec_shared.cc, compiled by g++), so a CPU test can hold the GPU's arithmetic to the CPU
// codecs' bytes (tests/unit/test_codec_shared_math.py; docs/gpu.md).
//
// Floats: every add, subtract, multiply and divide goes through Add/Sub/Mul/Div, which are
// __fadd_rn & co. on the device (no contraction into an FMA whatever the flags) and plain
// operators on the host (g++ -O2 on x86-64 without -march: SSE, no FMA, no reordering).
//
// Reduction order (the only float reductions are int8's min/max and onebit's mean |x|):
//  - min and max of finite floats are exact in any order, except for the sign of a zero
//    extreme; a chunk whose min or max is +-0 is settled by Int8LaneMinMax, the CPU loop's
//    order (8 lanes, then the first of equal lanes), run by one thread;
//  - onebit's mean |x| of a chunk is OneBitLaneSum for lanes 0..7 (lane j: elements j, j+8,
//    ... of the whole groups of eight; lane 0 then the tail, in order) added by
//    OneBitScale in lane order 0..7, then divided by the chunk's length: quantize.cc's
//    MeanAbs and its AVX2 twin. On the GPU, 8 threads of a block each run one lane.
// So the scales are computed on the device, in a fixed order that the CPU codec shares.
#ifndef TFPS_CC_CODEC_CODEC_MATH_H_
#define TFPS_CC_CODEC_CODEC_MATH_H_

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TFPS_HD __host__ __device__ __forceinline__
#else
#define TFPS_HD inline
#endif

namespace tfps {
namespace codec_math {

constexpr int kLanes = 8;  // onebit's and int8's lane count (quantize.cc)

TFPS_HD uint32_t Bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

TFPS_HD float FromBits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

TFPS_HD float Add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
TFPS_HD float Sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
TFPS_HD float Mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
TFPS_HD float Div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
TFPS_HD float Abs(float x) { return FromBits(Bits(x) & 0x7fffffffu); }
TFPS_HD float QuietNaN() { return FromBits(0x7fc00000u); }
TFPS_HD bool IsFinite(float x) { return (Bits(x) & 0x7f800000u) != 0x7f800000u; }

// ---- fp16 / bf16 (float_codecs.cc) ---------------------------------------------------------

// Round to nearest even, overflow to +-Inf, NaN to a quiet NaN (Maratos' branch-free
// conversion, as float_codecs.cc).
TFPS_HD uint16_t FloatToHalf(float f) {
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = Mul(Mul(Abs(f), scale_to_inf), scale_to_zero);
  const uint32_t w = Bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xff000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = Add(FromBits((bias >> 1) + 0x07800000u), base);
  const uint32_t bits = Bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007c00u;
  const uint32_t mantissa_bits = bits & 0x00000fffu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xff000000u ? 0x7e00u : nonsign));
}

TFPS_HD float HalfToFloat(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normalized = Mul(FromBits((two_w >> 4) + (0xe0u << 23)), 0x1.0p-112f);
  const float denormalized = Sub(FromBits((two_w >> 17) | (126u << 23)), 0.5f);
  return FromBits(sign | (two_w < (1u << 27) ? Bits(denormalized) : Bits(normalized)));
}

TFPS_HD uint16_t FloatToBFloat16(float f) {
  const uint32_t u = Bits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  return static_cast<uint16_t>(nan ? ((u >> 16) | 0x0040u) : rounded);
}

TFPS_HD float BFloat16ToFloat(uint16_t b) { return FromBits(static_cast<uint32_t>(b) << 16); }

// ---- int8 (quantize.cc) ---------------------------------------------------------------------

// A chunk's min and max in the CPU loop's order: lane j keeps the first minimum (maximum) it
// meets among elements j, j+8, ...; lane 0 then the tail; then the first of equal lanes
// (std::min_element / max_element). Only the sign of a zero extreme depends on the order.
TFPS_HD void Int8LaneMinMax(const float* x, uint64_t len, float* lo, float* hi) {
  float l[kLanes], h[kLanes];
  for (int j = 0; j < kLanes; ++j) l[j] = h[j] = x[0];
  uint64_t i = 0;
  for (; i + kLanes <= len; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      l[j] = x[i + j] < l[j] ? x[i + j] : l[j];
      h[j] = x[i + j] > h[j] ? x[i + j] : h[j];
    }
  }
  for (; i < len; ++i) {
    l[0] = x[i] < l[0] ? x[i] : l[0];
    h[0] = x[i] > h[0] ? x[i] : h[0];
  }
  float ml = l[0], mh = h[0];
  for (int j = 1; j < kLanes; ++j) {
    if (l[j] < ml) ml = l[j];
    if (mh < h[j]) mh = h[j];
  }
  *lo = ml;
  *hi = mh;
}

// One step of an order-free min/max reduction of finite floats (exact; the sign of a zero
// extreme is settled by Int8LaneMinMax afterwards).
TFPS_HD float Min(float a, float b) { return b < a ? b : a; }
TFPS_HD float Max(float a, float b) { return a < b ? b : a; }

// 255 / (max - min), 0 for a constant chunk.
TFPS_HD float Int8Inv(float lo, float hi) { return hi > lo ? Div(255.0f, Sub(hi, lo)) : 0.0f; }

// The code of x: std::min((x - lo) * inv + 0.5f, 255.0f) truncated. A NaN (0 * Inf when
// 255 / (hi - lo) overflows) stays NaN through the min and its code's low byte is 0 on both
// (x86's cvttss2si gives INT_MIN, CUDA's conversion 0).
TFPS_HD uint8_t Int8Code(float x, float lo, float inv) {
  const float a = Add(Mul(Sub(x, lo), inv), 0.5f);
  const float v = 255.0f < a ? 255.0f : a;
  if (v != v) return 0;
  return static_cast<uint8_t>(static_cast<int32_t>(v));
}

TFPS_HD float Int8Step(float lo, float hi) { return Div(Sub(hi, lo), 255.0f); }
TFPS_HD float Int8Value(uint8_t q, float lo, float step) {
  return Add(lo, Mul(static_cast<float>(q), step));
}

// ---- onebit (quantize.cc) -------------------------------------------------------------------

// Lane `lane` of a chunk's sum of |x| (see the top of this file).
TFPS_HD float OneBitLaneSum(const float* x, uint64_t len, int lane) {
  const uint64_t whole = len - len % kLanes;
  float acc = 0.0f;
  for (uint64_t i = static_cast<uint64_t>(lane); i < whole; i += kLanes) {
    acc = Add(acc, Abs(x[i]));
  }
  if (lane == 0) {
    for (uint64_t i = whole; i < len; ++i) acc = Add(acc, Abs(x[i]));
  }
  return acc;
}

// The chunk's scale from its lane sums: mean |x|, NaN when the chunk holds a NaN or Inf.
TFPS_HD float OneBitScale(const float* lanes, uint64_t len, bool all_finite) {
  float sum = 0.0f;
  for (int j = 0; j < kLanes; ++j) sum = Add(sum, lanes[j]);
  return all_finite ? Div(sum, static_cast<float>(len)) : QuietNaN();
}

// Byte b of the sign bits of x[0, n): bit t set when x[8b + t] < 0.
TFPS_HD uint8_t OneBitByte(const float* x, uint64_t n, uint64_t b) {
  uint32_t byte = 0;
  for (uint64_t t = 0; t < 8 && 8 * b + t < n; ++t) {
    byte |= static_cast<uint32_t>(x[8 * b + t] < 0.0f) << t;
  }
  return static_cast<uint8_t>(byte);
}

// +-scale: the sign bit flipped in the scale's bits (a NaN scale stays NaN).
TFPS_HD float OneBitValue(uint32_t scale_bits, uint32_t bit) {
  return FromBits(scale_bits ^ (bit << 31));
}

// ---- error feedback (error_feedback.cc) -----------------------------------------------------

// What is kept of p - D(C(p)): a NaN or Inf has travelled and would poison every later step.
TFPS_HD float Residual(float p, float decoded) {
  const float r = Sub(p, decoded);
  return Sub(r, r) == 0.0f ? r : 0.0f;
}

// ---- topk (sparse_codecs.cc) ----------------------------------------------------------------

// The rank of x: the bits of |x| order like its value; NaN ranks above Inf.
TFPS_HD uint32_t TopKKey(float x) { return Bits(x) & 0x7fffffffu; }

}  // namespace codec_math
}  // namespace tfps

#endif  // TFPS_CC_CODEC_CODEC_MATH_H_

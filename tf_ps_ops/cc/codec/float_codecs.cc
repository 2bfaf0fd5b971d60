// fp16 and bf16: one 16-bit value per element. The conversions are branch-free integer and
// float arithmetic (after M. Dukhan's FP16 library) so the loops vectorise on any x86-64 or
// ARM without F16C or AVX-512 at build time; ties round to even as NumPy and TF do.
#include <cstring>

#include "tf_ps_ops/cc/codec/codec_internal.h"

namespace tfps {
namespace codec_internal {

namespace {

inline uint16_t FloatToHalf(float f) {
  // Scaling by 2^112 then 2^-110 rounds the mantissa at binary16's precision (overflow
  // goes to Inf) in the FPU's own round-to-nearest-even; the bias trick then places the
  // exponent. NaN becomes the quiet NaN 0x7e00 with its sign.
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = (__builtin_fabsf(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = Bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xff000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = FromBits((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = Bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007c00u;
  const uint32_t mantissa_bits = bits & 0x00000fffu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xff000000u ? 0x7e00u : nonsign));
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  // Normal values: shift the exponent and mantissa into place, rebias by multiplying.
  const float normalized = FromBits((two_w >> 4) + (0xe0u << 23)) * 0x1.0p-112f;
  // Subnormals: put the mantissa under a fixed exponent and subtract the implicit one.
  const float denormalized = FromBits((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t result =
      sign | (two_w < (1u << 27) ? Bits(denormalized) : Bits(normalized));
  return FromBits(result);
}

inline uint16_t FloatToBFloat16(float f) {
  const uint32_t u = Bits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  // A NaN's payload could round into Inf; keep it a (quiet) NaN.
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  return static_cast<uint16_t>(nan ? ((u >> 16) | 0x0040u) : rounded);
}

}  // namespace

// The 16-bit values are staged through memcpy: payloads are only byte-aligned.
void EncodeFp16(const float* in, uint64_t n, uint8_t* out) {
  for (uint64_t i = 0; i < n; ++i) {
    const uint16_t h = FloatToHalf(in[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

void DecodeFp16(const uint8_t* in, uint64_t n, float* out) {
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = HalfToFloat(h);
  }
}

void EncodeBf16(const float* in, uint64_t n, uint8_t* out) {
  for (uint64_t i = 0; i < n; ++i) {
    const uint16_t h = FloatToBFloat16(in[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

void DecodeBf16(const uint8_t* in, uint64_t n, float* out) {
  for (uint64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    out[i] = FromBits(static_cast<uint32_t>(h) << 16);
  }
}

}  // namespace codec_internal
}  // namespace tfps

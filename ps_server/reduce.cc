#include "ps_server/reduce.h"

#include <cstring>
#include <type_traits>

namespace tfps {

namespace {

template <typename T>
void SumTyped(void* dst, const void* src, uint64_t count) {
  // Buffers come from ZeroMQ frames and may be only byte-aligned: the compiler emits
  // unaligned vector loads for this loop.
  T* __restrict d = static_cast<T*>(dst);
  const T* __restrict s = static_cast<const T*>(src);
  for (uint64_t i = 0; i < count; ++i) d[i] += s[i];
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void SumHalfTyped(void* dst, const void* src, uint64_t count) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  for (uint64_t i = 0; i < count; ++i) d[i] = FromFloat(ToFloat(d[i]) + ToFloat(s[i]));
}

// Elementwise combiners. Min and Max return NaN when either side is NaN; bools (0/1 bytes)
// use Max for or, Min or Times for and.
struct Min {
  template <typename T>
  static T Apply(T a, T b) {
    if (a != a || b != b) return a != a ? a : b;  // NaN wins
    return b < a ? b : a;
  }
};
struct Max {
  template <typename T>
  static T Apply(T a, T b) {
    if (a != a || b != b) return a != a ? a : b;
    return b > a ? b : a;
  }
};
struct Times {
  template <typename T>
  static T Apply(T a, T b) {
    // Integer products wrap around (through unsigned arithmetic, which is defined).
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<decltype(a * b)>;
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
};
struct Or {
  template <typename T>
  static T Apply(T a, T b) { return (a | b) != 0 ? 1 : 0; }
};

template <typename T, typename Combine>
void CombineTyped(void* dst, const void* src, uint64_t count) {
  T* __restrict d = static_cast<T*>(dst);
  const T* __restrict s = static_cast<const T*>(src);
  for (uint64_t i = 0; i < count; ++i) d[i] = Combine::Apply(d[i], s[i]);
}

template <ReduceOp op>
struct CombinerOf;
template <>
struct CombinerOf<ReduceOp::kMin> { using type = Min; };
template <>
struct CombinerOf<ReduceOp::kMax> { using type = Max; };
template <>
struct CombinerOf<ReduceOp::kProduct> { using type = Times; };

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float), ReduceOp op>
void HalfCombine(void* dst, const void* src, uint64_t count) {
  using Combine = typename CombinerOf<op>::type;
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  for (uint64_t i = 0; i < count; ++i) {
    d[i] = FromFloat(Combine::Apply(ToFloat(d[i]), ToFloat(s[i])));
  }
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return FromBits(sign | 0x7f800000 | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return FromBits(sign);
    // Subnormal: normalise.
    exp = 127 - 15 + 1;
    while ((mant & 0x400) == 0) {
      mant <<= 1;
      --exp;
    }
    mant &= 0x3ff;
    return FromBits(sign | (exp << 23) | (mant << 13));
  }
  return FromBits(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

uint16_t FloatToHalf(float f) {
  const uint32_t u = Bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7fffffff;
  if (abs >= 0x7f800000) {  // inf or nan
    return sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0);
  }
  if (abs >= 0x477ff000) return sign | 0x7c00;  // rounds to >= 65520: overflow to inf
  if (abs < 0x38800000) {                        // below the smallest normal half
    // A subnormal half holds round(x * 2^24); adding and subtracting 1.5 * 2^23 makes
    // the FPU round that product to the nearest-even integer.
    volatile float scaled = FromBits(abs) * 16777216.0f;
    scaled += 12582912.0f;
    const float r = scaled - 12582912.0f;
    return sign | static_cast<uint16_t>(r);
  }
  // Normal: rebias exponent, round mantissa to 10 bits, nearest-even.
  uint32_t v = abs - ((127 - 15) << 23);
  v += 0x0fff + ((v >> 13) & 1);
  return sign | static_cast<uint16_t>(v >> 13);
}

float BFloat16ToFloat(uint16_t b) { return FromBits(static_cast<uint32_t>(b) << 16); }

uint16_t FloatToBFloat16(float f) {
  const uint32_t u = Bits(f);
  if ((u & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((u >> 16) | 0x40);  // nan
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

void SumInto(DType dtype, void* dst, const void* src, uint64_t count) {
  switch (dtype) {
    case DType::kFloat32: SumTyped<float>(dst, src, count); break;
    case DType::kFloat64: SumTyped<double>(dst, src, count); break;
    case DType::kInt32: SumTyped<int32_t>(dst, src, count); break;
    case DType::kInt64: SumTyped<int64_t>(dst, src, count); break;
    case DType::kInt8: SumTyped<int8_t>(dst, src, count); break;
    case DType::kUInt8: SumTyped<uint8_t>(dst, src, count); break;
    case DType::kFloat16: SumHalfTyped<HalfToFloat, FloatToHalf>(dst, src, count); break;
    case DType::kBFloat16: SumHalfTyped<BFloat16ToFloat, FloatToBFloat16>(dst, src, count); break;
    case DType::kUInt16: SumTyped<uint16_t>(dst, src, count); break;
    case DType::kInt16: SumTyped<int16_t>(dst, src, count); break;
    case DType::kBool: CombineTyped<uint8_t, Or>(dst, src, count); break;
    default: break;  // DecodeHead rejects unknown dtypes before they get here
  }
}

namespace {

template <ReduceOp op, typename T>
void ReduceTyped(void* dst, const void* src, uint64_t count) {
  switch (op) {
    case ReduceOp::kMin: CombineTyped<T, Min>(dst, src, count); break;
    case ReduceOp::kMax: CombineTyped<T, Max>(dst, src, count); break;
    case ReduceOp::kProduct: CombineTyped<T, Times>(dst, src, count); break;
    default: break;
  }
}

template <ReduceOp op>
void ReduceAs(DType dtype, void* dst, const void* src, uint64_t count) {
  switch (dtype) {
    case DType::kFloat32: ReduceTyped<op, float>(dst, src, count); break;
    case DType::kFloat64: ReduceTyped<op, double>(dst, src, count); break;
    case DType::kInt32: ReduceTyped<op, int32_t>(dst, src, count); break;
    case DType::kInt64: ReduceTyped<op, int64_t>(dst, src, count); break;
    case DType::kInt8: ReduceTyped<op, int8_t>(dst, src, count); break;
    case DType::kUInt8: ReduceTyped<op, uint8_t>(dst, src, count); break;
    case DType::kUInt16: ReduceTyped<op, uint16_t>(dst, src, count); break;
    case DType::kInt16: ReduceTyped<op, int16_t>(dst, src, count); break;
    case DType::kBool: ReduceTyped<op, uint8_t>(dst, src, count); break;  // 0/1: min = and
    case DType::kFloat16: HalfCombine<HalfToFloat, FloatToHalf, op>(dst, src, count); break;
    case DType::kBFloat16:
      HalfCombine<BFloat16ToFloat, FloatToBFloat16, op>(dst, src, count);
      break;
    default: break;
  }
}

}  // namespace

void ReduceInto(ReduceOp op, DType dtype, void* dst, const void* src, uint64_t count) {
  switch (op) {
    case ReduceOp::kSum: SumInto(dtype, dst, src, count); break;
    case ReduceOp::kMin: ReduceAs<ReduceOp::kMin>(dtype, dst, src, count); break;
    case ReduceOp::kMax: ReduceAs<ReduceOp::kMax>(dtype, dst, src, count); break;
    case ReduceOp::kProduct: ReduceAs<ReduceOp::kProduct>(dtype, dst, src, count); break;
    default: break;  // DecodeHead rejects unknown ops
  }
}

}  // namespace tfps

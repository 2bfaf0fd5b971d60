// int8 (min-max per chunk, as Bagua's ByteGrad) and onebit (sign + mean |x| per chunk).
// Per-chunk headers first, then the packed body, so the body loops run over contiguous
// bytes. Reductions keep eight partial results: without -ffast-math the compiler may not
// reorder a float reduction itself, but it vectorises eight independent lanes.
#include <algorithm>
#include <cstring>
#include <limits>

#include "tf_ps_ops/cc/codec/codec.h"
#include "tf_ps_ops/cc/codec/codec_internal.h"
#include "tf_ps_ops/cc/codec/codec_math.h"

namespace tfps {
namespace codec_internal {

namespace {

constexpr int kLanes = 8;

// Whether x[0, len) holds a NaN or +-Inf: an integer OR of exponent-all-ones tests.
bool AllFinite(const float* x, uint64_t len) {
  uint32_t bad = 0;
  for (uint64_t i = 0; i < len; ++i) {
    bad |= static_cast<uint32_t>((Bits(x[i]) & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

float MeanAbs(const float* x, uint64_t len) {
  float acc[kLanes] = {};
  uint64_t i = 0;
  for (; i + kLanes <= len; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += __builtin_fabsf(x[i + j]);
  }
  for (; i < len; ++i) acc[0] += __builtin_fabsf(x[i]);
  float sum = 0.0f;
  for (int j = 0; j < kLanes; ++j) sum += acc[j];
  return sum / static_cast<float>(len);
}

void StoreFloat(uint8_t* p, float v) { std::memcpy(p, &v, 4); }
float LoadFloat(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

namespace {

// The codes of one chunk of EncodeInt8; kLen == kChunk (a constant trip count) for full
// chunks, which GCC's -O2 vectoriser takes, as DecodeInt8Chunk below.
template <uint64_t kLen>
inline void QuantizeInt8(const float* __restrict x, uint64_t len, float lo, float inv,
                         uint8_t* __restrict q) {
  if (kLen != 0) len = kLen;
  for (uint64_t i = 0; i < len; ++i) {
    const float v = std::min((x[i] - lo) * inv + 0.5f, 255.0f);
    q[i] = static_cast<uint8_t>(static_cast<int32_t>(v));  // v >= 0.5: truncation rounds
  }
}

}  // namespace

void EncodeInt8(const float* in, uint64_t n, uint8_t* out) {
  const uint64_t chunks = (n + kChunk - 1) / kChunk;
  uint8_t* body = out + 8 * chunks;
  for (uint64_t c = 0; c < chunks; ++c) {
    const float* x = in + c * kChunk;
    const uint64_t len = std::min<uint64_t>(kChunk, n - c * kChunk);
    uint8_t* q = body + c * kChunk;
    float lo, hi;
    if (!AllFinite(x, len)) {
      // The chunk decodes to NaN throughout (docs/compression.md, NaN and Inf).
      lo = hi = std::numeric_limits<float>::quiet_NaN();
      std::memset(q, 0, len);
    } else {
      codec_math::Int8LaneMinMax(x, len, &lo, &hi);  // the GPU codec's too (codec_math.h)
      // hi == lo: every code is 0 and decodes to lo exactly.
      const float inv = hi > lo ? 255.0f / (hi - lo) : 0.0f;
      if (len == kChunk) {
        QuantizeInt8<kChunk>(x, kChunk, lo, inv, q);
      } else {
        QuantizeInt8<0>(x, len, lo, inv, q);
      }
    }
    StoreFloat(out + 8 * c, lo);
    StoreFloat(out + 8 * c + 4, hi);
  }
}

namespace {

// One chunk of DecodeInt8 (kAdd: added into out). Instantiated with kLen == kChunk for
// every full chunk: a constant trip count, which GCC's -O2 vectoriser takes (a run-time
// one it leaves scalar, and then the loop's speed hangs on where it lands in the code).
template <uint64_t kLen, bool kAdd>
inline void DecodeInt8Chunk(const uint8_t* header, const uint8_t* __restrict q,
                            uint64_t len, float* __restrict y) {
  if (kLen != 0) len = kLen;
  const float lo = LoadFloat(header), hi = LoadFloat(header + 4);
  const float step = (hi - lo) / 255.0f;
  for (uint64_t i = 0; i < len; ++i) {
    const float v = lo + static_cast<float>(q[i]) * step;
    y[i] = kAdd ? y[i] + v : v;
  }
}

template <bool kAdd>
void DecodeInt8Impl(const uint8_t* in, uint64_t n, float* out) {
  const uint64_t chunks = (n + kChunk - 1) / kChunk;
  const uint8_t* body = in + 8 * chunks;
  for (uint64_t c = 0; c < chunks; ++c) {
    const uint64_t start = c * kChunk;
    if (n - start >= kChunk) {
      DecodeInt8Chunk<kChunk, kAdd>(in + 8 * c, body + start, kChunk, out + start);
    } else {
      DecodeInt8Chunk<0, kAdd>(in + 8 * c, body + start, n - start, out + start);
    }
  }
}

}  // namespace

void DecodeInt8(const uint8_t* in, uint64_t n, float* out) { DecodeInt8Impl<false>(in, n, out); }

void DecodeInt8Add(const uint8_t* in, uint64_t n, float* out) {
  DecodeInt8Impl<true>(in, n, out);
}

namespace {

// EncodeOneBit without SIMD, with the scales and the signs written to separate places
// (the whole span's layout, or the partial last chunk of it).
void EncodeOneBitScalar(const float* in, uint64_t n, uint8_t* scales, uint8_t* bits_out) {
  const uint64_t chunks = (n + kChunk - 1) / kChunk;
  for (uint64_t c = 0; c < chunks; ++c) {
    const float* x = in + c * kChunk;
    const uint64_t len = std::min<uint64_t>(kChunk, n - c * kChunk);
    const float scale =
        AllFinite(x, len) ? MeanAbs(x, len) : std::numeric_limits<float>::quiet_NaN();
    StoreFloat(scales + 4 * c, scale);
  }
  // kChunk is a multiple of 8, so a byte of signs never straddles two chunks.
  uint8_t* __restrict bits = bits_out;
  const uint64_t full = n / 8;
  for (uint64_t b = 0; b < full; ++b) {
    uint32_t byte = 0;
    for (int t = 0; t < 8; ++t) byte |= static_cast<uint32_t>(in[8 * b + t] < 0.0f) << t;
    bits[b] = static_cast<uint8_t>(byte);
  }
  if (n % 8 != 0) {
    uint32_t byte = 0;
    for (uint64_t t = 0; t < n % 8; ++t) {
      byte |= static_cast<uint32_t>(in[8 * full + t] < 0.0f) << t;
    }
    bits[full] = static_cast<uint8_t>(byte);
  }
}

}  // namespace

void EncodeOneBit(const float* in, uint64_t n, uint8_t* out) {
  const uint64_t chunks = (n + kChunk - 1) / kChunk;
  if (ActiveSimd() == Simd::kAvx2) {  // full chunks in one pass; a partial last one below
    const uint64_t full = n / kChunk;
    for (uint64_t c = 0; c < full; ++c) {
      EncodeOneBitChunkAvx2(in + c * kChunk, out + 4 * chunks + c * kChunk / 8, out + 4 * c);
    }
    if (full == chunks) return;
    const uint64_t start = full * kChunk;
    EncodeOneBitScalar(in + start, n - start, out + 4 * full, out + 4 * chunks + start / 8);
    return;
  }
  EncodeOneBitScalar(in, n, out, out + 4 * chunks);
}

namespace {

// One chunk of EncodeOneBitFeedback. Inlined with len == kChunk for every full chunk, so
// that GCC's -O2 vectoriser (which takes no loop needing a run-time remainder) sees
// constant trip counts.
template <uint64_t kLen>
inline void OneBitFeedbackChunk(const float* __restrict x, float* __restrict p, uint64_t len,
                                uint8_t* __restrict b, uint8_t* scale_out) {
  if (kLen != 0) len = kLen;
  for (uint64_t i = 0; i < len; ++i) p[i] += x[i];
  const bool finite = AllFinite(p, len);
  const float scale = finite ? MeanAbs(p, len) : std::numeric_limits<float>::quiet_NaN();
  StoreFloat(scale_out, scale);
  const uint64_t full = len / 8;
  for (uint64_t j = 0; j < full; ++j) {
    uint32_t byte = 0;
    for (int t = 0; t < 8; ++t) byte |= static_cast<uint32_t>(p[8 * j + t] < 0.0f) << t;
    b[j] = static_cast<uint8_t>(byte);
  }
  if (len % 8 != 0) {
    uint32_t byte = 0;
    for (uint64_t t = 0; t < len % 8; ++t) {
      byte |= static_cast<uint32_t>(p[8 * full + t] < 0.0f) << t;
    }
    b[full] = static_cast<uint8_t>(byte);
  }
  if (!finite) {  // the chunk decodes to NaN: nothing of it is kept
    std::memset(p, 0, len * sizeof(float));
    return;
  }
  const uint32_t bits = Bits(scale);
  for (uint64_t i = 0; i < len; ++i) {
    // p - (+-scale), the decoded value built as DecodeOneBit builds it (the sign bit).
    const float r = p[i] - FromBits(bits ^ (static_cast<uint32_t>(p[i] < 0.0f) << 31));
    p[i] = r - r == 0.0f ? r : 0.0f;
  }
}

}  // namespace

// onebit with error feedback in one go (error_feedback.cc): per chunk, p = g + e written
// into e, the scale and signs of p, then e <- p - (+-scale), with non-finite residuals
// dropped to 0. The same bytes and residuals as adding, EncodeOneBit, DecodeOneBit and
// subtracting, in passes over a chunk that stays in L1 instead of five over the
// partition, and no decoded copy.
void EncodeOneBitFeedback(const float* g, float* e, uint64_t n, uint8_t* out) {
  const uint64_t chunks = (n + kChunk - 1) / kChunk;
  uint8_t* bits = out + 4 * chunks;
  const bool avx2 = ActiveSimd() == Simd::kAvx2;
  for (uint64_t c = 0; c < chunks; ++c) {
    const uint64_t start = c * kChunk;
    if (n - start >= kChunk && avx2) {
      OneBitFeedbackChunkAvx2(g + start, e + start, bits + start / 8, out + 4 * c);
    } else if (n - start >= kChunk) {
      OneBitFeedbackChunk<kChunk>(g + start, e + start, kChunk, bits + start / 8, out + 4 * c);
    } else {
      OneBitFeedbackChunk<0>(g + start, e + start, n - start, bits + start / 8, out + 4 * c);
    }
  }
}

namespace {

// DecodeOneBit, or with kAdd out[i] += the decoded value (the server's sum).
template <bool kAdd>
void DecodeOneBitImpl(const uint8_t* in, uint64_t n, float* out) {
  const uint64_t chunks = (n + kChunk - 1) / kChunk;
  const uint8_t* bits = in + 4 * chunks;
  const bool avx2 = ActiveSimd() == Simd::kAvx2;
  for (uint64_t c = 0; c < chunks; ++c) {
    // A set bit flips the scale's sign bit: no branch, and whole bytes at a time (a chunk
    // starts on a byte, kChunk being a multiple of 8).
    const uint32_t scale = Bits(LoadFloat(in + 4 * c));
    const uint64_t start = c * kChunk;
    const uint64_t len = std::min<uint64_t>(kChunk, n - start);
    const uint8_t* __restrict b = bits + start / 8;
    float* __restrict y = out + start;
    if (avx2 && len == kChunk) {
      DecodeOneBitChunkAvx2(scale, b, y, kAdd);
      continue;
    }
    uint64_t i = 0;
    for (; i + 8 <= len; i += 8) {
      const uint32_t byte = b[i / 8];
      for (uint32_t t = 0; t < 8; ++t) {
        const float v = FromBits(scale ^ (((byte >> t) & 1u) << 31));
        y[i + t] = kAdd ? y[i + t] + v : v;
      }
    }
    for (; i < len; ++i) {
      const float v = FromBits(scale ^ (((b[i / 8] >> (i % 8)) & 1u) << 31));
      y[i] = kAdd ? y[i] + v : v;
    }
  }
}

}  // namespace

void DecodeOneBit(const uint8_t* in, uint64_t n, float* out) {
  DecodeOneBitImpl<false>(in, n, out);
}

void DecodeOneBitAdd(const uint8_t* in, uint64_t n, float* out) {
  DecodeOneBitImpl<true>(in, n, out);
}

}  // namespace codec_internal
}  // namespace tfps

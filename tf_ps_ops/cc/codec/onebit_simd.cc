// onebit's hot loops for one full chunk (kChunk elements) with AVX2, chosen at run time
// (codec_internal.h, Simd). The build stays baseline x86-64: only these functions carry
// target("avx2"), and nothing calls them unless the CPU has it.
//
// Byte for byte what the scalar loops in quantize.cc produce: the same comparisons
// (x < 0, ordered, so NaN and -0 give 0), the scale summed in the same 8 lanes in the same
// order (lane j holds x[j], x[j+8], ...; then lanes 0..7 in turn), the same adds and
// subtracts per element, and no multiply that could be contracted into an FMA (target
// "avx2" does not enable FMA anyway). No AVX-512 variant: its 16-lane sum would need a
// shuffle per vector to keep the 8-lane order the bytes depend on.
#include <atomic>
#include <cstring>
#include <limits>

#include "tf_ps_ops/cc/codec/codec.h"
#include "tf_ps_ops/cc/codec/codec_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TFPS_HAVE_X86 1
#endif

namespace tfps {
namespace codec_internal {

#ifdef TFPS_HAVE_X86

namespace {

// Sums the 8 lanes in order 0..7, as MeanAbs does after its loop.
__attribute__((target("avx2"))) inline float SumLanesInOrder(__m256 acc) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float sum = 0.0f;
  for (int j = 0; j < 8; ++j) sum += lanes[j];
  return sum;
}

}  // namespace

__attribute__((target("avx2"))) void OneBitFeedbackChunkAvx2(const float* g, float* p,
                                                              uint8_t* bits,
                                                              uint8_t* scale_out) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i exp_mask = _mm256_set1_epi32(0x7f800000);
  __m256 acc = zero;
  __m256i bad = _mm256_setzero_si256();
  // One pass: p = e + g stored, |p| summed, non-finite values noted, signs packed.
  for (uint64_t i = 0; i < kChunk; i += 8) {
    const __m256 v = _mm256_add_ps(_mm256_loadu_ps(p + i), _mm256_loadu_ps(g + i));
    _mm256_storeu_ps(p + i, v);
    acc = _mm256_add_ps(acc, _mm256_and_ps(v, abs_mask));
    const __m256i e = _mm256_and_si256(_mm256_castps_si256(v), exp_mask);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(e, exp_mask));
    bits[i / 8] = static_cast<uint8_t>(_mm256_movemask_ps(_mm256_cmp_ps(v, zero, _CMP_LT_OQ)));
  }
  if (!_mm256_testz_si256(bad, bad)) {  // the chunk decodes to NaN: nothing of it is kept
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(scale_out, &nan, 4);
    std::memset(p, 0, kChunk * sizeof(float));
    return;
  }
  const float scale = SumLanesInOrder(acc) / static_cast<float>(kChunk);
  std::memcpy(scale_out, &scale, 4);
  // e <- p - (+-scale); a non-finite residual (the scale overflowed) is dropped to 0.
  const __m256 s = _mm256_set1_ps(scale);
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  for (uint64_t i = 0; i < kChunk; i += 8) {
    const __m256 v = _mm256_loadu_ps(p + i);
    const __m256 d = _mm256_xor_ps(s, _mm256_and_ps(_mm256_cmp_ps(v, zero, _CMP_LT_OQ), sign));
    const __m256 r = _mm256_sub_ps(v, d);
    const __m256 keep = _mm256_cmp_ps(_mm256_sub_ps(r, r), zero, _CMP_EQ_OQ);
    _mm256_storeu_ps(p + i, _mm256_and_ps(keep, r));
  }
}

__attribute__((target("avx2"))) void EncodeOneBitChunkAvx2(const float* x, uint8_t* bits,
                                                            uint8_t* scale_out) {
  const __m256 zero = _mm256_setzero_ps();
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i exp_mask = _mm256_set1_epi32(0x7f800000);
  __m256 acc = zero;
  __m256i bad = _mm256_setzero_si256();
  for (uint64_t i = 0; i < kChunk; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    acc = _mm256_add_ps(acc, _mm256_and_ps(v, abs_mask));
    const __m256i e = _mm256_and_si256(_mm256_castps_si256(v), exp_mask);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(e, exp_mask));
    bits[i / 8] = static_cast<uint8_t>(_mm256_movemask_ps(_mm256_cmp_ps(v, zero, _CMP_LT_OQ)));
  }
  const float scale = _mm256_testz_si256(bad, bad)
                          ? SumLanesInOrder(acc) / static_cast<float>(kChunk)
                          : std::numeric_limits<float>::quiet_NaN();
  std::memcpy(scale_out, &scale, 4);
}

namespace {

// The 8 decoded values of one byte of signs: the scale with its sign bit flipped where
// the byte's bit is set (bit t for element t).
__attribute__((target("avx2"))) inline __m256 Expand(uint8_t byte, __m256i scale, __m256i select) {
  const __m256i set = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(byte), select), select);
  return _mm256_castsi256_ps(_mm256_xor_si256(scale, _mm256_slli_epi32(set, 31)));
}

}  // namespace

__attribute__((target("avx2"))) void DecodeOneBitChunkAvx2(uint32_t scale_bits,
                                                            const uint8_t* bits, float* out,
                                                            bool add) {
  const __m256i scale = _mm256_set1_epi32(static_cast<int>(scale_bits));
  const __m256i select = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  if (add) {
    for (uint64_t j = 0; j < kChunk / 8; ++j) {
      float* y = out + 8 * j;
      _mm256_storeu_ps(y, _mm256_add_ps(_mm256_loadu_ps(y), Expand(bits[j], scale, select)));
    }
  } else {
    for (uint64_t j = 0; j < kChunk / 8; ++j) {
      _mm256_storeu_ps(out + 8 * j, Expand(bits[j], scale, select));
    }
  }
}

Simd BestSimd() {
  static const Simd best = __builtin_cpu_supports("avx2") ? Simd::kAvx2 : Simd::kScalar;
  return best;
}

#else  // not x86: the scalar loops only

void OneBitFeedbackChunkAvx2(const float*, float*, uint8_t*, uint8_t*) {}
void EncodeOneBitChunkAvx2(const float*, uint8_t*, uint8_t*) {}
void DecodeOneBitChunkAvx2(uint32_t, const uint8_t*, float*, bool) {}
Simd BestSimd() { return Simd::kScalar; }

#endif

namespace {
// -1: not chosen yet (BestSimd on first use).
std::atomic<int> g_simd{-1};
}  // namespace

Simd ActiveSimd() {
  int s = g_simd.load(std::memory_order_relaxed);
  if (s < 0) {
    s = static_cast<int>(BestSimd());
    g_simd.store(s, std::memory_order_relaxed);
  }
  return static_cast<Simd>(s);
}

Simd SetSimd(Simd wanted) {
  const Simd s = static_cast<int>(wanted) <= static_cast<int>(BestSimd()) ? wanted : BestSimd();
  g_simd.store(static_cast<int>(s), std::memory_order_relaxed);
  return s;
}

}  // namespace codec_internal
}  // namespace tfps

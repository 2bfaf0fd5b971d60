// The codecs' loops, one pair per format, behind codec.h's dispatch. Each takes spans
// already checked by the caller (sizes from EncodedBytes) and never fails.
#ifndef TFPS_CC_CODEC_CODEC_INTERNAL_H_
#define TFPS_CC_CODEC_CODEC_INTERNAL_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "tf_ps_ops/cc/codec/codec_math.h"

namespace tfps {
namespace codec_internal {

using codec_math::Bits;
using codec_math::FromBits;

void EncodeFp16(const float* in, uint64_t n, uint8_t* out);
void DecodeFp16(const uint8_t* in, uint64_t n, float* out);
void EncodeBf16(const float* in, uint64_t n, uint8_t* out);
void DecodeBf16(const uint8_t* in, uint64_t n, float* out);

void EncodeInt8(const float* in, uint64_t n, uint8_t* out);
void DecodeInt8(const uint8_t* in, uint64_t n, float* out);
void EncodeOneBit(const float* in, uint64_t n, uint8_t* out);
void DecodeOneBit(const uint8_t* in, uint64_t n, float* out);
// Encodes g + e into out and leaves the new residual in e (error_feedback.h's rule).
void EncodeOneBitFeedback(const float* g, float* e, uint64_t n, uint8_t* out);

// out[i] += DecodeOneBit(in)[i]: the server adds a later push straight into the round's sum.
void DecodeOneBitAdd(const uint8_t* in, uint64_t n, float* out);
// out[i] += DecodeInt8(in)[i], the same float operations as decoding, then adding.
void DecodeInt8Add(const uint8_t* in, uint64_t n, float* out);

// The instruction set of onebit's chunk loops, chosen at run time (onebit_simd.cc): the
// best the CPU has unless a test or benchmark asks for less. Every choice gives the same
// bytes.
enum class Simd : int { kScalar = 0, kAvx2 = 1 };
Simd BestSimd();
Simd ActiveSimd();
// Asks for `wanted` (clamped to BestSimd()); returns what is now active. Process-wide.
Simd SetSimd(Simd wanted);
// One full chunk (kChunk elements) of EncodeOneBit, EncodeOneBitFeedback and
// DecodeOneBit(Add) with AVX2.
void EncodeOneBitChunkAvx2(const float* x, uint8_t* bits, uint8_t* scale_out);
void OneBitFeedbackChunkAvx2(const float* g, float* p, uint8_t* bits, uint8_t* scale_out);
void DecodeOneBitChunkAvx2(uint32_t scale_bits, const uint8_t* bits, float* out, bool add);

void EncodeTopK(const float* in, uint64_t n, uint64_t k, uint8_t* out);
void DecodeTopK(const uint8_t* in, uint64_t n, uint64_t k, float* out);
void EncodeRandomK(const float* in, uint64_t n, uint64_t k, uint64_t seed, uint8_t* out);
void DecodeRandomK(const uint8_t* in, uint64_t n, uint64_t k, uint64_t seed, float* out);

// The k of n indices randomk keeps for `seed`, ascending (the GPU codecs use the same list).
std::vector<uint32_t> RandomKIndices(uint64_t n, uint64_t k, uint64_t seed);

}  // namespace codec_internal
}  // namespace tfps

#endif  // TFPS_CC_CODEC_CODEC_INTERNAL_H_

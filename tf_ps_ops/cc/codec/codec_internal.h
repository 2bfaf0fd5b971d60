// The codecs' loops, one pair per format, behind codec.h's dispatch. Each takes spans
// already checked by the caller (sizes from EncodedBytes) and never fails.
#ifndef TFPS_CC_CODEC_CODEC_INTERNAL_H_
#define TFPS_CC_CODEC_CODEC_INTERNAL_H_

#include <cstdint>
#include <cstring>

namespace tfps {
namespace codec_internal {

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

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

void EncodeTopK(const float* in, uint64_t n, uint64_t k, uint8_t* out);
void DecodeTopK(const uint8_t* in, uint64_t n, uint64_t k, float* out);
void EncodeRandomK(const float* in, uint64_t n, uint64_t k, uint64_t seed, uint8_t* out);
void DecodeRandomK(const uint8_t* in, uint64_t n, uint64_t k, uint64_t seed, float* out);

}  // namespace codec_internal
}  // namespace tfps

#endif  // TFPS_CC_CODEC_CODEC_INTERNAL_H_

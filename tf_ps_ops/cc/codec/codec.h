// Gradient codecs: encode a float32 span into bytes and decode it back (docs/compression.md).
//
// Base layer, no TensorFlow: the worker encodes each partition before the push and decodes
// the reply; the server decodes every push, sums in float32 and re-encodes the sum. Both
// ends derive the encoded size from (codec, element count, k) alone, so a payload of the
// wrong size is refused before it is read.
//
// Formats (little-endian, no alignment assumed: payloads come from ZeroMQ frames):
//   fp16     n x IEEE binary16, round to nearest even (overflow -> +-Inf)
//   bf16     n x bfloat16, round to nearest even (NaN stays a quiet NaN)
//   int8     per chunk of kChunk elements: float32 min, float32 max; then n x uint8
//            q = round((x - min) * 255 / (max - min)), x' = min + q * (max - min) / 255
//   onebit   per chunk: float32 scale = mean |x|; then ceil(n/8) bytes of sign bits
//            (bit i%8 of byte i/8 set: x < 0); x' = +-scale
//   topk     k x uint32 index (ascending), then k x float32 value: the k largest |x|
//   randomk  k x float32 value at k indices drawn from a seed both ends know (the key,
//            partition and step), so the indices never travel
// NaN/Inf: fp16/bf16/topk/randomk carry them as values; a chunk of int8 or onebit that holds
// one decodes to NaN throughout (the fp32 sum would be non-finite anyway, and a loss scaler
// must see it).
#ifndef TFPS_CC_CODEC_CODEC_H_
#define TFPS_CC_CODEC_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "tf_ps_ops/cc/common/status.h"

namespace tfps {

// Values are on the wire (Header::codec): never renumber.
enum class CodecId : uint8_t {
  kNone = 0,
  kFp16 = 1,
  kBf16 = 2,
  kInt8 = 3,
  kOneBit = 4,
  kTopK = 5,
  kRandomK = 6,
};
constexpr uint8_t kMaxCodecId = 6;

// Elements per chunk of int8 and onebit (one min/max pair or one scale per chunk). Fixed
// by the protocol: both ends must agree, and 1024 keeps the per-chunk overhead at 0.8%
// (int8) and 3% (onebit) while a chunk's range still follows the gradient's local scale.
constexpr size_t kChunk = 1024;

// The smallest topk/randomk ratio, and so the largest element count one kept element may
// stand for: a receiver allocates the decoded partition, so without a bound a few bytes
// of topk could make it allocate gigabytes.
constexpr double kMinSparseRatio = 1.0 / 65536;
// The most elements one encoded message may stand for (1 GiB decoded), for the same reason.
constexpr uint64_t kMaxEncodedElements = uint64_t{1} << 28;

// What a user asks for: "int8", "topk:0.01", ...
struct CodecSpec {
  CodecId id = CodecId::kNone;
  double ratio = 1.0;  // topk / randomk: the fraction of elements kept, [kMinSparseRatio, 1]
};

// Parses "none", "fp16", "bf16", "int8", "onebit", "topk:R", "randomk:R" (R in
// [kMinSparseRatio, 1]).
Status ParseCodec(const std::string& text, CodecSpec* spec);
std::string CodecName(const CodecSpec& spec);  // the text ParseCodec reads back
const char* CodecIdName(CodecId id);

// Whether encoding loses information that error feedback should carry to the next step.
bool CodecWantsErrorFeedback(CodecId id);

// Elements topk/randomk keep of n: ceil(ratio * n) clamped to [1, n] (0 when n is 0).
uint64_t SparseK(double ratio, uint64_t n);

// Bytes of an encoded span of n elements; k matters for topk/randomk only.
uint64_t EncodedBytes(CodecId id, uint64_t n, uint64_t k);

// Checks a received payload: n <= kMaxEncodedElements, and `bytes` must equal EncodedBytes
// for a valid k (topk/randomk: n * kMinSparseRatio <= k <= n); sets *k (the kept count for
// topk/randomk, else 0). The first check a decoder's caller makes.
Status CheckEncoded(CodecId id, uint64_t n, uint64_t bytes, uint64_t* k);

// Encodes in[0, n) into out, which holds EncodedBytes(id, n, k) bytes. `seed` picks the
// randomk indices (RandomKSeed). kNone copies the floats.
Status Encode(CodecId id, const float* in, uint64_t n, uint64_t k, uint64_t seed, uint8_t* out);

// Decodes into out[0, n), overwriting it (dense: zeros where topk/randomk kept nothing).
// `in` holds EncodedBytes(id, n, k) bytes (checked by CheckEncoded first).
Status Decode(CodecId id, const uint8_t* in, uint64_t n, uint64_t k, uint64_t seed, float* out);

// Adds the decoding of `in` to out[0, n): out[i] += Decode(...)[i], the same float32 adds as
// decoding into a buffer and summing it (the server's sum of a round's later pushes).
// Whether `id` decodes straight into the sum without a decoded copy: onebit and int8.
bool CodecDecodesAdding(CodecId id);
// For a codec without it, InvalidArgument (decode into a buffer and add that).
Status DecodeAdd(CodecId id, const uint8_t* in, uint64_t n, float* out);

// The randomk seed of one partition of one step: every worker and the server compute the
// same one, so they pick the same indices.
uint64_t RandomKSeed(uint64_t key, uint32_t partition, uint64_t step);

}  // namespace tfps

#endif  // TFPS_CC_CODEC_CODEC_H_

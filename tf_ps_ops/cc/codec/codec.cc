#include "tf_ps_ops/cc/codec/codec.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tf_ps_ops/cc/codec/codec_internal.h"

namespace tfps {

using namespace codec_internal;  // NOLINT: the per-format loops

namespace {

constexpr struct {
  CodecId id;
  const char* name;
} kNames[] = {
    {CodecId::kNone, "none"},     {CodecId::kFp16, "fp16"},   {CodecId::kBf16, "bf16"},
    {CodecId::kInt8, "int8"},     {CodecId::kOneBit, "onebit"}, {CodecId::kTopK, "topk"},
    {CodecId::kRandomK, "randomk"},
};

uint64_t Chunks(uint64_t n) { return (n + kChunk - 1) / kChunk; }

bool IsSparse(CodecId id) { return id == CodecId::kTopK || id == CodecId::kRandomK; }

}  // namespace

const char* CodecIdName(CodecId id) {
  for (const auto& e : kNames) {
    if (e.id == id) return e.name;
  }
  return "unknown";
}

Status ParseCodec(const std::string& text, CodecSpec* spec) {
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  for (const auto& e : kNames) {
    if (name != e.name) continue;
    CodecSpec out;
    out.id = e.id;
    if (IsSparse(e.id)) {
      if (colon == std::string::npos) {
        return InvalidArgument("compression '" + text + "' needs a ratio: " + name + ":0.01");
      }
      const std::string arg = text.substr(colon + 1);
      char* end = nullptr;
      errno = 0;
      out.ratio = std::strtod(arg.c_str(), &end);
      if (errno != 0 || end == arg.c_str() || *end != '\0' || !(out.ratio >= kMinSparseRatio) ||
          !(out.ratio <= 1.0)) {
        return InvalidArgument("compression '" + text +
                               "': the ratio must be in [1/65536, 1]");
      }
    } else if (colon != std::string::npos) {
      return InvalidArgument("compression '" + text + "': " + name + " takes no argument");
    }
    *spec = out;
    return Status::Ok();
  }
  return InvalidArgument("compression '" + text +
                         "' is not one of none, fp16, bf16, int8, onebit, topk:R, randomk:R");
}

std::string CodecName(const CodecSpec& spec) {
  std::string name = CodecIdName(spec.id);
  if (IsSparse(spec.id)) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), ":%.17g", spec.ratio);
    name += buf;
  }
  return name;
}

bool CodecWantsErrorFeedback(CodecId id) {
  return id == CodecId::kOneBit || IsSparse(id);
}

uint64_t SparseK(double ratio, uint64_t n) {
  if (n == 0) return 0;
  const double k = std::ceil(ratio * static_cast<double>(n));
  if (!(k >= 1.0)) return 1;
  if (k >= static_cast<double>(n)) return n;
  return static_cast<uint64_t>(k);
}

uint64_t EncodedBytes(CodecId id, uint64_t n, uint64_t k) {
  switch (id) {
    case CodecId::kNone: return 4 * n;
    case CodecId::kFp16:
    case CodecId::kBf16: return 2 * n;
    case CodecId::kInt8: return 8 * Chunks(n) + n;
    case CodecId::kOneBit: return 4 * Chunks(n) + (n + 7) / 8;
    case CodecId::kTopK: return 8 * k;
    case CodecId::kRandomK: return 4 * k;
  }
  return 0;
}

Status CheckEncoded(CodecId id, uint64_t n, uint64_t bytes, uint64_t* k) {
  *k = 0;
  if (static_cast<uint8_t>(id) > kMaxCodecId) {
    return InvalidArgument("unknown codec " + std::to_string(static_cast<int>(id)));
  }
  if (id != CodecId::kNone && n > kMaxEncodedElements) {
    return InvalidArgument(std::string(CodecIdName(id)) + " message of " + std::to_string(n) +
                           " elements: at most " + std::to_string(kMaxEncodedElements) +
                           " per partition");
  }
  if (IsSparse(id)) {
    const uint64_t unit = id == CodecId::kTopK ? 8 : 4;
    // n == 0 keeps nothing; otherwise SparseK's range: k <= n and k >= n * kMinSparseRatio
    // (so at least 1).
    const uint64_t kept = bytes / unit;
    const uint64_t least = (n + 65535) / 65536;
    if (bytes % unit != 0 || kept > n || kept < least) {
      return InvalidArgument(std::string(CodecIdName(id)) + " payload of " +
                             std::to_string(bytes) + " bytes does not fit " +
                             std::to_string(n) + " elements");
    }
    *k = kept;
    return Status::Ok();
  }
  if (bytes != EncodedBytes(id, n, 0)) {
    return InvalidArgument(std::string(CodecIdName(id)) + " payload of " +
                           std::to_string(bytes) + " bytes, expected " +
                           std::to_string(EncodedBytes(id, n, 0)) + " for " +
                           std::to_string(n) + " elements");
  }
  return Status::Ok();
}

// A sparse codec keeps 1..n of n elements, n at most 2^32; the others ignore k.
static Status CheckKept(CodecId id, uint64_t n, uint64_t k) {
  if (IsSparse(id) && (k > n || (n > 0 && k == 0) || n > (uint64_t{1} << 32))) {
    return InvalidArgument("cannot keep " + std::to_string(k) + " of " + std::to_string(n));
  }
  return Status::Ok();
}

Status Encode(CodecId id, const float* in, uint64_t n, uint64_t k, uint64_t seed, uint8_t* out) {
  Status kept = CheckKept(id, n, k);
  if (!kept.ok()) return kept;
  switch (id) {
    case CodecId::kNone:
      if (n > 0) std::memcpy(out, in, 4 * n);
      return Status::Ok();
    case CodecId::kFp16: EncodeFp16(in, n, out); return Status::Ok();
    case CodecId::kBf16: EncodeBf16(in, n, out); return Status::Ok();
    case CodecId::kInt8: EncodeInt8(in, n, out); return Status::Ok();
    case CodecId::kOneBit: EncodeOneBit(in, n, out); return Status::Ok();
    case CodecId::kTopK: EncodeTopK(in, n, k, out); return Status::Ok();
    case CodecId::kRandomK: EncodeRandomK(in, n, k, seed, out); return Status::Ok();
  }
  return InvalidArgument("unknown codec " + std::to_string(static_cast<int>(id)));
}

Status Decode(CodecId id, const uint8_t* in, uint64_t n, uint64_t k, uint64_t seed, float* out) {
  Status kept = CheckKept(id, n, k);
  if (!kept.ok()) return kept;
  switch (id) {
    case CodecId::kNone:
      if (n > 0) std::memcpy(out, in, 4 * n);
      return Status::Ok();
    case CodecId::kFp16: DecodeFp16(in, n, out); return Status::Ok();
    case CodecId::kBf16: DecodeBf16(in, n, out); return Status::Ok();
    case CodecId::kInt8: DecodeInt8(in, n, out); return Status::Ok();
    case CodecId::kOneBit: DecodeOneBit(in, n, out); return Status::Ok();
    case CodecId::kTopK: DecodeTopK(in, n, k, out); return Status::Ok();
    case CodecId::kRandomK: DecodeRandomK(in, n, k, seed, out); return Status::Ok();
  }
  return InvalidArgument("unknown codec " + std::to_string(static_cast<int>(id)));
}

bool CodecDecodesAdding(CodecId id) { return id == CodecId::kOneBit || id == CodecId::kInt8; }

Status DecodeAdd(CodecId id, const uint8_t* in, uint64_t n, float* out) {
  switch (id) {
    case CodecId::kOneBit: DecodeOneBitAdd(in, n, out); return Status::Ok();
    case CodecId::kInt8: DecodeInt8Add(in, n, out); return Status::Ok();
    default: break;
  }
  return InvalidArgument(std::string(CodecIdName(id)) + " does not decode into a sum");
}

}  // namespace tfps

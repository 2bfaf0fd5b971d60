// codec_shared.h: the GPU kernels' order on the host. Each function names the kernel it
// mirrors in codec_gpu.cu.cc / sparse_codecs_gpu.cu.cc.
#include "tf_ps_ops/cc/codec/codec_shared.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "tf_ps_ops/cc/codec/codec_internal.h"
#include "tf_ps_ops/cc/codec/codec_math.h"

namespace tfps {
namespace codec_shared {

using namespace codec_math;  // NOLINT: the shared math

namespace {

void StoreFloat(uint8_t* p, float v) { std::memcpy(p, &v, 4); }
float LoadFloat(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// EncodeInt8Kernel: one block per chunk; thread t takes elements t, t + 256, ...; then a
// tree over the threads' results (stride 128, 64, ..., 1); zero extremes by the lane order.
void EncodeInt8(const float* in, uint64_t n, uint8_t* out) {
  const uint64_t chunks = (n + kChunk - 1) / kChunk;
  for (uint64_t c = 0; c < chunks; ++c) {
    const float* x = in + c * kChunk;
    const uint64_t len = std::min<uint64_t>(kChunk, n - c * kChunk);
    uint8_t* q = out + 8 * chunks + c * kChunk;
    bool finite = true;
    for (uint64_t i = 0; i < len; ++i) finite = finite && IsFinite(x[i]);
    if (!finite) {
      std::memset(q, 0, len);
      StoreFloat(out + 8 * c, QuietNaN());
      StoreFloat(out + 8 * c + 4, QuietNaN());
      continue;
    }
    float lo_t[kBlockThreads], hi_t[kBlockThreads];
    for (int t = 0; t < kBlockThreads; ++t) {
      lo_t[t] = hi_t[t] = x[0];
      for (uint64_t i = static_cast<uint64_t>(t); i < len; i += kBlockThreads) {
        lo_t[t] = Min(lo_t[t], x[i]);
        hi_t[t] = Max(hi_t[t], x[i]);
      }
    }
    for (int stride = kBlockThreads / 2; stride > 0; stride /= 2) {
      for (int t = 0; t < stride; ++t) {
        lo_t[t] = Min(lo_t[t], lo_t[t + stride]);
        hi_t[t] = Max(hi_t[t], hi_t[t + stride]);
      }
    }
    float lo = lo_t[0], hi = hi_t[0];
    if (lo == 0.0f || hi == 0.0f) Int8LaneMinMax(x, len, &lo, &hi);
    const float inv = Int8Inv(lo, hi);
    for (uint64_t i = 0; i < len; ++i) q[i] = Int8Code(x[i], lo, inv);
    StoreFloat(out + 8 * c, lo);
    StoreFloat(out + 8 * c + 4, hi);
  }
}

// DecodeInt8Kernel: one thread per element.
void DecodeInt8(const uint8_t* in, uint64_t n, float* out) {
  const uint64_t chunks = (n + kChunk - 1) / kChunk;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t c = i / kChunk;
    const float lo = LoadFloat(in + 8 * c), hi = LoadFloat(in + 8 * c + 4);
    out[i] = Int8Value(in[8 * chunks + i], lo, Int8Step(lo, hi));
  }
}

// OneBitScaleKernel (8 lane threads per chunk, then thread 0 adds the lanes) and
// OneBitSignsKernel (one thread per byte).
void EncodeOneBit(const float* in, uint64_t n, uint8_t* out) {
  const uint64_t chunks = (n + kChunk - 1) / kChunk;
  for (uint64_t c = 0; c < chunks; ++c) {
    const float* x = in + c * kChunk;
    const uint64_t len = std::min<uint64_t>(kChunk, n - c * kChunk);
    bool finite = true;
    for (uint64_t i = 0; i < len; ++i) finite = finite && IsFinite(x[i]);
    float lanes[kLanes];
    for (int j = 0; j < kLanes; ++j) lanes[j] = OneBitLaneSum(x, len, j);
    StoreFloat(out + 4 * c, OneBitScale(lanes, len, finite));
  }
  for (uint64_t b = 0; b < (n + 7) / 8; ++b) out[4 * chunks + b] = OneBitByte(in, n, b);
}

// DecodeOneBitKernel: one thread per element.
void DecodeOneBit(const uint8_t* in, uint64_t n, float* out) {
  const uint64_t chunks = (n + kChunk - 1) / kChunk;
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t scale = Bits(LoadFloat(in + 4 * (i / kChunk)));
    out[i] = OneBitValue(scale, (in[4 * chunks + i / 8] >> (i % 8)) & 1u);
  }
}

// EncodeTopK (sparse_codecs_gpu.cu.cc): the exact k-th largest key (found here by sorting,
// there by a radix select: the same value), every key above it, then the lowest-index ties,
// written in ascending index order.
void EncodeTopK(const float* in, uint64_t n, uint64_t k, uint8_t* out) {
  if (k == 0) return;
  std::vector<uint32_t> keys(n);
  for (uint64_t i = 0; i < n; ++i) keys[i] = TopKKey(in[i]);
  std::vector<uint32_t> sorted = keys;
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(),
                   [](uint32_t a, uint32_t b) { return a > b; });
  const uint32_t threshold = sorted[k - 1];
  uint64_t above = 0;
  for (uint64_t i = 0; i < n; ++i) above += keys[i] > threshold;
  uint64_t ties = k - above, m = 0;
  for (uint64_t i = 0; i < n && m < k; ++i) {
    const bool tie = keys[i] == threshold;
    if (!(keys[i] > threshold || (tie && ties > 0))) continue;
    if (tie) --ties;
    const uint32_t index = static_cast<uint32_t>(i);
    std::memcpy(out + 4 * m, &index, 4);
    std::memcpy(out + 4 * k + 4 * m, in + i, 4);
    ++m;
  }
}

}  // namespace

Status Encode(CodecId id, const float* in, uint64_t n, uint64_t k, uint64_t seed,
              uint8_t* out) {
  switch (id) {
    case CodecId::kNone:
      if (n > 0) std::memcpy(out, in, 4 * n);
      return Status::Ok();
    case CodecId::kFp16:
    case CodecId::kBf16:
      for (uint64_t i = 0; i < n; ++i) {  // EncodeHalfKernel
        const uint16_t h = id == CodecId::kBf16 ? FloatToBFloat16(in[i]) : FloatToHalf(in[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return Status::Ok();
    case CodecId::kInt8: EncodeInt8(in, n, out); return Status::Ok();
    case CodecId::kOneBit: EncodeOneBit(in, n, out); return Status::Ok();
    case CodecId::kTopK:
      if (k > n) break;
      EncodeTopK(in, n, k, out);
      return Status::Ok();
    case CodecId::kRandomK: {
      if (k > n) break;
      const std::vector<uint32_t> idx = codec_internal::RandomKIndices(n, k, seed);
      for (uint64_t m = 0; m < k; ++m) std::memcpy(out + 4 * m, in + idx[m], 4);
      return Status::Ok();
    }
  }
  return InvalidArgument("shared-math encode: bad codec or k");
}

Status Decode(CodecId id, const uint8_t* in, uint64_t n, uint64_t k, uint64_t seed,
              float* out) {
  switch (id) {
    case CodecId::kNone:
      if (n > 0) std::memcpy(out, in, 4 * n);
      return Status::Ok();
    case CodecId::kFp16:
    case CodecId::kBf16:
      for (uint64_t i = 0; i < n; ++i) {  // DecodeHalfKernel
        uint16_t h;
        std::memcpy(&h, in + 2 * i, 2);
        out[i] = id == CodecId::kBf16 ? BFloat16ToFloat(h) : HalfToFloat(h);
      }
      return Status::Ok();
    case CodecId::kInt8: DecodeInt8(in, n, out); return Status::Ok();
    case CodecId::kOneBit: DecodeOneBit(in, n, out); return Status::Ok();
    case CodecId::kTopK:
    case CodecId::kRandomK: {
      if (k > n) break;
      std::fill(out, out + n, 0.0f);
      const std::vector<uint32_t> idx =
          id == CodecId::kRandomK ? codec_internal::RandomKIndices(n, k, seed)
                                  : std::vector<uint32_t>();
      const uint8_t* values = id == CodecId::kTopK ? in + 4 * k : in;
      for (uint64_t m = 0; m < k; ++m) {
        uint32_t index = 0;
        if (id == CodecId::kTopK) {
          std::memcpy(&index, in + 4 * m, 4);
        } else {
          index = idx[m];
        }
        if (index < n) std::memcpy(out + index, values + 4 * m, 4);
      }
      return Status::Ok();
    }
  }
  return InvalidArgument("shared-math decode: bad codec or k");
}

Status EncodeFeedback(CodecId id, const float* g, float* e, uint64_t n, uint64_t k,
                      uint64_t seed, uint8_t* out) {
  if (!CodecWantsErrorFeedback(id)) return codec_shared::Encode(id, g, n, k, seed, out);
  for (uint64_t i = 0; i < n; ++i) e[i] = Add(e[i], g[i]);  // FeedbackAddKernel
  TFPS_RETURN_IF_ERROR(codec_shared::Encode(id, e, n, k, seed, out));
  std::vector<float> d(n);
  TFPS_RETURN_IF_ERROR(codec_shared::Decode(id, out, n, k, seed, d.data()));
  for (uint64_t i = 0; i < n; ++i) e[i] = Residual(e[i], d[i]);  // FeedbackResidualKernel
  return Status::Ok();
}

}  // namespace codec_shared
}  // namespace tfps

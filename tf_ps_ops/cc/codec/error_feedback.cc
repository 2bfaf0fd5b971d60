#include "tf_ps_ops/cc/codec/error_feedback.h"

#include "tf_ps_ops/cc/codec/codec_internal.h"

namespace tfps {

std::vector<float>& ErrorFeedback::Find(uint64_t key, uint32_t partition, uint64_t n) {
  auto range = residuals_.equal_range(Slot(key, partition));
  for (auto it = range.first; it != range.second; ++it) {
    Entry& e = it->second;
    if (e.key != key || e.partition != partition) continue;
    if (e.residual.size() != n) e.residual.assign(n, 0.0f);
    return e.residual;
  }
  auto it = residuals_.emplace(Slot(key, partition),
                               Entry{key, partition, std::vector<float>(n, 0.0f)});
  return it->second.residual;
}

Status ErrorFeedback::Encode(uint64_t key, uint32_t partition, CodecId id, const float* in,
                             uint64_t n, uint64_t k, uint64_t seed, uint8_t* out) {
  if (!CodecWantsErrorFeedback(id)) return tfps::Encode(id, in, n, k, seed, out);
  std::vector<float>& e = Find(key, partition, n);
  if (id == CodecId::kOneBit) {  // fused: the codec the 1-bit path runs every step
    codec_internal::EncodeOneBitFeedback(in, e.data(), n, out);
    return Status::Ok();
  }
  float* __restrict p = e.data();
  for (uint64_t i = 0; i < n; ++i) p[i] += in[i];  // e holds p = g + e from here on
  TFPS_RETURN_IF_ERROR(tfps::Encode(id, p, n, k, seed, out));
  decoded_.resize(n);
  TFPS_RETURN_IF_ERROR(tfps::Decode(id, out, n, k, seed, decoded_.data()));
  const float* __restrict d = decoded_.data();
  for (uint64_t i = 0; i < n; ++i) {
    // A NaN or Inf has travelled (as a value, or as a NaN chunk); kept in the memory it
    // would poison every later step of this partition, so it is dropped.
    const float r = p[i] - d[i];
    p[i] = r - r == 0.0f ? r : 0.0f;
  }
  return Status::Ok();
}

std::vector<float> ErrorFeedback::Residual(uint64_t key, uint32_t partition) const {
  auto range = residuals_.equal_range(Slot(key, partition));
  for (auto it = range.first; it != range.second; ++it) {
    if (it->second.key == key && it->second.partition == partition) return it->second.residual;
  }
  return {};
}

}  // namespace tfps

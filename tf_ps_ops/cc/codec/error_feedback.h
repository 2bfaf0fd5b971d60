// Error feedback (docs/compression.md): for a lossy codec C with decoder D, keep the part of
// each partition that did not travel and add it to the next step's values:
//   p = g + e;  send C(p);  e <- p - D(C(p)).
// The worker keeps one memory per (tensor key, partition) for what it pushes; each server
// summation thread keeps its own for the sums it re-encodes (sign(sum) != sum of signs).
// Not thread-safe: one owner thread (the engine thread, a summation thread).
#ifndef TFPS_CC_CODEC_ERROR_FEEDBACK_H_
#define TFPS_CC_CODEC_ERROR_FEEDBACK_H_

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "tf_ps_ops/cc/codec/codec.h"
#include "tf_ps_ops/cc/common/status.h"

namespace tfps {

class ErrorFeedback {
 public:
  // Encodes in[0, n) as Encode() does, with the residual of (key, partition) added first
  // and updated after. A residual of another length (the tensor changed shape) restarts
  // from zero. Codecs without loss worth carrying (CodecWantsErrorFeedback false) encode
  // plainly and keep no memory.
  Status Encode(uint64_t key, uint32_t partition, CodecId id, const float* in, uint64_t n,
                uint64_t k, uint64_t seed, uint8_t* out);

  // The residual held for (key, partition); empty when there is none. For tests.
  std::vector<float> Residual(uint64_t key, uint32_t partition) const;
  size_t size() const { return residuals_.size(); }
  void Clear() { residuals_.clear(); }

 private:
  static uint64_t Slot(uint64_t key, uint32_t partition) {
    return key ^ (uint64_t{partition} * 0x9e3779b97f4a7c15ull);
  }
  struct Entry {
    uint64_t key;
    uint32_t partition;
    std::vector<float> residual;
  };
  std::unordered_multimap<uint64_t, Entry> residuals_;
  std::vector<float> decoded_;  // scratch for D(C(p)), reused across calls

  std::vector<float>& Find(uint64_t key, uint32_t partition, uint64_t n);
};

}  // namespace tfps

#endif  // TFPS_CC_CODEC_ERROR_FEEDBACK_H_

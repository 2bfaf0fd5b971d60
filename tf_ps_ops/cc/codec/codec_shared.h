// The GPU codec kernels' algorithms (codec_gpu.cu.cc) run on the host, built from the same
// codec_math.h functions and in the kernels' order (blocks of 256 threads, per-chunk tree
// reductions, 8 lane threads for onebit's scale). They exist for one check: a CPU test
// (tests/unit/test_codec_shared_math.py, through _core) asserts that they give the CPU
// codecs' bytes, bit for bit, on random and hostile inputs. That is the only check of the
// GPU codecs' logic on a machine without a GPU; tests/gpu/gpu_checks.py then checks the GPU
// against the CPU where there is one.
#ifndef TFPS_CC_CODEC_CODEC_SHARED_H_
#define TFPS_CC_CODEC_CODEC_SHARED_H_

#include <cstdint>

#include "tf_ps_ops/cc/codec/codec.h"

namespace tfps {
namespace codec_shared {

// The threads of one block of the GPU's chunk kernels (codec_gpu_internal.h's kThreads).
constexpr int kBlockThreads = 256;

Status Encode(CodecId id, const float* in, uint64_t n, uint64_t k, uint64_t seed, uint8_t* out);
Status Decode(CodecId id, const uint8_t* in, uint64_t n, uint64_t k, uint64_t seed, float* out);
// The GPU's error-feedback sequence (gpu::EncodeFeedbackOnDevice): e = e + g, encode e,
// e = Residual(e, decode(...)); plain Encode for a codec without feedback.
Status EncodeFeedback(CodecId id, const float* g, float* e, uint64_t n, uint64_t k,
                      uint64_t seed, uint8_t* out);

}  // namespace codec_shared
}  // namespace tfps

#endif  // TFPS_CC_CODEC_CODEC_SHARED_H_

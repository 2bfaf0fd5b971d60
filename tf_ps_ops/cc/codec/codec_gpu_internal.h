// What the GPU codec files share (codec_gpu.cu.cc, sparse_codecs_gpu.cu.cc); nvcc only.
#ifndef TFPS_CC_CODEC_CODEC_GPU_INTERNAL_H_
#define TFPS_CC_CODEC_CODEC_GPU_INTERNAL_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "tf_ps_ops/cc/common/status.h"

namespace tfps {
namespace gpu {

constexpr int kThreads = 256;

inline unsigned Blocks(uint64_t n) {
  return static_cast<unsigned>((n + kThreads - 1) / kThreads);
}

__device__ __forceinline__ uint32_t Bits(float f) { return __float_as_uint(f); }
__device__ __forceinline__ float FromBits(uint32_t u) { return __uint_as_float(u); }

// topk and randomk (sparse_codecs_gpu.cu.cc), arguments checked by the dispatch.
Status EncodeTopK(const float* in, uint64_t n, uint64_t k, uint8_t* out, cudaStream_t stream);
Status DecodeTopK(const uint8_t* in, uint64_t n, uint64_t k, float* out, cudaStream_t stream);
Status EncodeRandomK(const float* in, uint64_t n, uint64_t k, uint64_t seed, uint8_t* out,
                     cudaStream_t stream);
Status DecodeRandomK(const uint8_t* in, uint64_t n, uint64_t k, uint64_t seed, float* out,
                     cudaStream_t stream);

}  // namespace gpu
}  // namespace tfps

#endif  // TFPS_CC_CODEC_CODEC_GPU_INTERNAL_H_

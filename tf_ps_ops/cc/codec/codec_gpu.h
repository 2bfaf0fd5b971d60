// The codecs of codec.h on the GPU: the same formats, byte for byte, from and into device
// memory, queued on a CUDA stream. CUDA builds only (codec_gpu.cu.cc; docs/gpu.md); the
// header needs no CUDA header, so TF kernels and tests include it as it is.
//
// The per-element and per-chunk math is codec_math.h's, shared with a host twin
// (codec_shared.h) that a CPU test holds to the CPU codecs' bytes.
// Bit-identical to the CPU codecs, for every input (NaN and Inf included):
//  - fp16/bf16, decoding, int8's quantisation and onebit's signs are per element: the same
//    integer operations, and the float ones spelled with round-to-nearest intrinsics
//    (__fadd_rn, __fmul_rn, __fdiv_rn), compiled with -fmad=false -ftz=false (no fused
//    multiply-add, subnormals kept), as the CPU code is compiled without contraction;
//  - int8's min and max are exact whatever the order of the comparisons;
//  - onebit's mean |x| is the one float sum whose order matters: each chunk's eight lane sums
//    run in the CPU loop's order (lane j: elements j, j+8, ..., then lane 0 the tail), then
//    the lanes are added 0..7, as quantize.cc does;
//  - topk picks the same set: the exact k-th largest |x| (a radix select over the bits, as
//    the CPU's), everything above it, and the lowest-index ties; randomk the same indices
//    (RandomKIndices, computed on the host: the sampling is a sequential chain).
// So a GPU worker's payloads equal a CPU worker's, and a server needs no way to tell them
// apart.
#ifndef TFPS_CC_CODEC_CODEC_GPU_H_
#define TFPS_CC_CODEC_CODEC_GPU_H_

#include <cstdint>

#include "tf_ps_ops/cc/codec/codec.h"

namespace tfps {
namespace gpu {

// Encodes device floats in[0, n) into device bytes out (EncodedBytes(id, n, k), 4-byte
// aligned), queued on `stream` (a cudaStream_t; nullptr: the legacy default stream). topk
// waits for the stream three times (its radix select reads histograms on the host); the
// others return at once. Errors: a CUDA error, an unaligned buffer, n too large.
Status EncodeOnDevice(CodecId id, const float* in, uint64_t n, uint64_t k, uint64_t seed,
                      uint8_t* out, void* stream);

// Decodes device bytes into device floats out[0, n) (zeros where topk/randomk kept nothing).
// `in` must have passed CheckEncoded.
Status DecodeOnDevice(CodecId id, const uint8_t* in, uint64_t n, uint64_t k, uint64_t seed,
                      float* out, void* stream);

// Error feedback on the device, as ErrorFeedback::Encode (error_feedback.h) on the host:
// e[0, n) is the residual of one (key, partition), device memory that the caller keeps
// between steps (zeros at first); it becomes p = e + g, C(p) goes into out, and e is left
// holding Residual(p, D(C(p))) (codec_math.h). `scratch` holds n device floats. Codecs
// without feedback (CodecWantsErrorFeedback false) encode g and leave e alone.
Status EncodeFeedbackOnDevice(CodecId id, const float* g, float* e, uint64_t n, uint64_t k,
                              uint64_t seed, uint8_t* out, float* scratch, void* stream);

}  // namespace gpu
}  // namespace tfps

#endif  // TFPS_CC_CODEC_CODEC_GPU_H_

// The GPU codecs (codec_gpu.h says why each is bit-identical to the CPU's): fp16, bf16, int8
// and onebit here, topk and randomk in sparse_codecs_gpu.cu.cc, and the dispatch. Each
// function mirrors its CPU twin in float_codecs.cc or quantize.cc; read them side by side. Float arithmetic is spelled with the _rn intrinsics so that no compiler flag
// can fuse or reorder it.
#include <cstdint>
#include <string>
#include <vector>

#include "tf_ps_ops/cc/codec/codec_gpu.h"
#include "tf_ps_ops/cc/codec/codec_gpu_internal.h"
#include "tf_ps_ops/cc/codec/codec_math.h"
#include "tf_ps_ops/cc/common/cuda_status.h"

namespace tfps {
namespace gpu {
namespace {

using codec_math::Add;
using codec_math::BFloat16ToFloat;
using codec_math::FloatToBFloat16;
using codec_math::FloatToHalf;
using codec_math::HalfToFloat;
using codec_math::IsFinite;

// ---- fp16 / bf16 (float_codecs.cc): the conversions are codec_math.h's -------------------

__global__ void EncodeHalfKernel(const float* in, uint64_t n, bool bf16, uint16_t* out) {
  const uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i < n) out[i] = bf16 ? FloatToBFloat16(in[i]) : FloatToHalf(in[i]);
}

__global__ void DecodeHalfKernel(const uint16_t* in, uint64_t n, bool bf16, float* out) {
  const uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i < n) out[i] = bf16 ? BFloat16ToFloat(in[i]) : HalfToFloat(in[i]);
}

// ---- int8 and onebit (quantize.cc): one block per chunk of kChunk elements -----------------

__global__ void EncodeInt8Kernel(const float* in, uint64_t n, uint8_t* out) {
  __shared__ float lo_s[kThreads], hi_s[kThreads];
  const uint64_t chunks = (n + kChunk - 1) / kChunk;
  const uint64_t c = blockIdx.x;
  const float* x = in + c * kChunk;
  const uint64_t len = min(uint64_t{kChunk}, n - c * kChunk);
  uint8_t* q = out + 8 * chunks + c * kChunk;
  bool finite = true;
  float lo = x[0], hi = x[0];
  for (uint64_t i = threadIdx.x; i < len; i += blockDim.x) {
    finite = finite && IsFinite(x[i]);
    lo = codec_math::Min(lo, x[i]);  // order-free: min and max of finite floats are exact
    hi = codec_math::Max(hi, x[i]);
  }
  const bool all_finite = __syncthreads_and(finite);
  if (!all_finite) {
    for (uint64_t i = threadIdx.x; i < len; i += blockDim.x) q[i] = 0;
    if (threadIdx.x == 0) {
      reinterpret_cast<float*>(out)[2 * c] = __int_as_float(0x7fc00000);
      reinterpret_cast<float*>(out)[2 * c + 1] = __int_as_float(0x7fc00000);
    }
    return;
  }
  lo_s[threadIdx.x] = lo;
  hi_s[threadIdx.x] = hi;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      lo_s[threadIdx.x] = codec_math::Min(lo_s[threadIdx.x], lo_s[threadIdx.x + stride]);
      hi_s[threadIdx.x] = codec_math::Max(hi_s[threadIdx.x], hi_s[threadIdx.x + stride]);
    }
    __syncthreads();
  }
  lo = lo_s[0];
  hi = hi_s[0];
  __syncthreads();  // every thread has read them before thread 0 may rewrite them below
  // ±0 compare equal, so a tree may return either: zeros of both signs quantise alike, but
  // the stored min/max bits would differ from the CPU's. A chunk whose extreme is a zero
  // (rare) is settled in the CPU loop's lane order, by one thread.
  if (lo == 0.0f || hi == 0.0f) {
    if (threadIdx.x == 0) codec_math::Int8LaneMinMax(x, len, &lo_s[0], &hi_s[0]);
    __syncthreads();
    lo = lo_s[0];
    hi = hi_s[0];
  }
  const float inv = codec_math::Int8Inv(lo, hi);
  for (uint64_t i = threadIdx.x; i < len; i += blockDim.x) {
    q[i] = codec_math::Int8Code(x[i], lo, inv);
  }
  if (threadIdx.x == 0) {
    reinterpret_cast<float*>(out)[2 * c] = lo;
    reinterpret_cast<float*>(out)[2 * c + 1] = hi;
  }
}

__global__ void DecodeInt8Kernel(const uint8_t* in, uint64_t n, float* out) {
  const uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const uint64_t chunks = (n + kChunk - 1) / kChunk;
  const uint64_t c = i / kChunk;
  const float lo = reinterpret_cast<const float*>(in)[2 * c];
  const float hi = reinterpret_cast<const float*>(in)[2 * c + 1];
  out[i] = codec_math::Int8Value(in[8 * chunks + i], lo, codec_math::Int8Step(lo, hi));
}

// Mean |x| of a chunk in quantize.cc's order: lane j sums elements j, j+8, ... of the whole
// groups of eight; lane 0 then the tail; then lanes 0..7 in order.
__global__ void OneBitScaleKernel(const float* in, uint64_t n, float* scales) {
  __shared__ float lanes[8];
  const uint64_t c = blockIdx.x;
  const float* x = in + c * kChunk;
  const uint64_t len = min(uint64_t{kChunk}, n - c * kChunk);
  bool finite = true;
  for (uint64_t i = threadIdx.x; i < len; i += blockDim.x) finite = finite && IsFinite(x[i]);
  const bool all_finite = __syncthreads_and(finite);
  if (threadIdx.x < codec_math::kLanes) {
    lanes[threadIdx.x] = codec_math::OneBitLaneSum(x, len, static_cast<int>(threadIdx.x));
  }
  __syncthreads();
  if (threadIdx.x == 0) scales[c] = codec_math::OneBitScale(lanes, len, all_finite);
}

__global__ void OneBitSignsKernel(const float* in, uint64_t n, uint8_t* bits) {
  const uint64_t b = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (b >= (n + 7) / 8) return;
  bits[b] = codec_math::OneBitByte(in, n, b);
}

__global__ void DecodeOneBitKernel(const uint8_t* in, uint64_t n, float* out) {
  const uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const uint64_t chunks = (n + kChunk - 1) / kChunk;
  const uint32_t scale = Bits(reinterpret_cast<const float*>(in)[i / kChunk]);
  const uint8_t* bits = in + 4 * chunks;
  out[i] = codec_math::OneBitValue(scale, (bits[i / 8] >> (i % 8)) & 1u);
}

// Error feedback (error_feedback.cc): p = e + g in place of e, then e = Residual(p, D(C(p))).
__global__ void FeedbackAddKernel(const float* g, uint64_t n, float* e) {
  const uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i < n) e[i] = Add(e[i], g[i]);
}

__global__ void FeedbackResidualKernel(const float* decoded, uint64_t n, float* e) {
  const uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i < n) e[i] = codec_math::Residual(e[i], decoded[i]);
}

Status CheckArgs(CodecId id, uint64_t n, uint64_t k, const void* encoded) {
  if (reinterpret_cast<uintptr_t>(encoded) % 4 != 0) {
    return InvalidArgument(std::string("GPU ") + CodecIdName(id) +
                           ": the encoded buffer must be 4-byte aligned");
  }
  const bool sparse = id == CodecId::kTopK || id == CodecId::kRandomK;
  if (n >= (uint64_t{1} << 31) || (sparse && (k > n || (n > 0 && k == 0)))) {
    return InvalidArgument(std::string("GPU ") + CodecIdName(id) + ": cannot code " +
                           std::to_string(k) + " of " + std::to_string(n) + " elements");
  }
  return Status::Ok();
}

}  // namespace

Status EncodeOnDevice(CodecId id, const float* in, uint64_t n, uint64_t k, uint64_t seed,
                      uint8_t* out, void* stream_handle) {
  TFPS_RETURN_IF_ERROR(CheckArgs(id, n, k, out));
  cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  const std::string what = std::string("GPU ") + CodecIdName(id) + " encode of " +
                           std::to_string(n) + " elements";
  if (n == 0) return Status::Ok();
  const uint64_t chunks = (n + kChunk - 1) / kChunk;
  switch (id) {
    case CodecId::kNone:
      return CudaStatus(cudaMemcpyAsync(out, in, 4 * n, cudaMemcpyDeviceToDevice, stream), what);
    case CodecId::kFp16:
    case CodecId::kBf16:
      EncodeHalfKernel<<<Blocks(n), kThreads, 0, stream>>>(in, n, id == CodecId::kBf16,
                                                           reinterpret_cast<uint16_t*>(out));
      break;
    case CodecId::kInt8:
      EncodeInt8Kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(in, n, out);
      break;
    case CodecId::kOneBit:
      OneBitScaleKernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(
          in, n, reinterpret_cast<float*>(out));
      OneBitSignsKernel<<<Blocks((n + 7) / 8), kThreads, 0, stream>>>(in, n, out + 4 * chunks);
      break;
    case CodecId::kTopK:
      return EncodeTopK(in, n, k, out, stream).WithPrefix(what + ": ");
    case CodecId::kRandomK:
      return EncodeRandomK(in, n, k, seed, out, stream).WithPrefix(what + ": ");
    default:
      return InvalidArgument("unknown codec " + std::to_string(static_cast<int>(id)));
  }
  return CudaStatus(cudaGetLastError(), what);
}

Status DecodeOnDevice(CodecId id, const uint8_t* in, uint64_t n, uint64_t k, uint64_t seed,
                      float* out, void* stream_handle) {
  TFPS_RETURN_IF_ERROR(CheckArgs(id, n, k, in));
  cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  const std::string what = std::string("GPU ") + CodecIdName(id) + " decode of " +
                           std::to_string(n) + " elements";
  if (n == 0) return Status::Ok();
  switch (id) {
    case CodecId::kNone:
      return CudaStatus(cudaMemcpyAsync(out, in, 4 * n, cudaMemcpyDeviceToDevice, stream), what);
    case CodecId::kFp16:
    case CodecId::kBf16:
      DecodeHalfKernel<<<Blocks(n), kThreads, 0, stream>>>(
          reinterpret_cast<const uint16_t*>(in), n, id == CodecId::kBf16, out);
      break;
    case CodecId::kInt8:
      DecodeInt8Kernel<<<Blocks(n), kThreads, 0, stream>>>(in, n, out);
      break;
    case CodecId::kOneBit:
      DecodeOneBitKernel<<<Blocks(n), kThreads, 0, stream>>>(in, n, out);
      break;
    case CodecId::kTopK:
      return DecodeTopK(in, n, k, out, stream).WithPrefix(what + ": ");
    case CodecId::kRandomK:
      return DecodeRandomK(in, n, k, seed, out, stream).WithPrefix(what + ": ");
    default:
      return InvalidArgument("unknown codec " + std::to_string(static_cast<int>(id)));
  }
  return CudaStatus(cudaGetLastError(), what);
}

Status EncodeFeedbackOnDevice(CodecId id, const float* g, float* e, uint64_t n, uint64_t k,
                              uint64_t seed, uint8_t* out, float* scratch, void* stream_handle) {
  if (!CodecWantsErrorFeedback(id)) return EncodeOnDevice(id, g, n, k, seed, out, stream_handle);
  TFPS_RETURN_IF_ERROR(CheckArgs(id, n, k, out));
  if (n == 0) return Status::Ok();
  cudaStream_t stream = static_cast<cudaStream_t>(stream_handle);
  const std::string what = std::string("GPU ") + CodecIdName(id) + " error feedback of " +
                           std::to_string(n) + " elements";
  FeedbackAddKernel<<<Blocks(n), kThreads, 0, stream>>>(g, n, e);
  TFPS_RETURN_IF_ERROR(CudaStatus(cudaGetLastError(), what));
  TFPS_RETURN_IF_ERROR(EncodeOnDevice(id, e, n, k, seed, out, stream_handle));
  TFPS_RETURN_IF_ERROR(DecodeOnDevice(id, out, n, k, seed, scratch, stream_handle));
  FeedbackResidualKernel<<<Blocks(n), kThreads, 0, stream>>>(scratch, n, e);
  return CudaStatus(cudaGetLastError(), what);
}

}  // namespace gpu
}  // namespace tfps

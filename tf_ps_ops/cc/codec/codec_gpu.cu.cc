// The GPU codecs (codec_gpu.h says why each is bit-identical to the CPU's): fp16, bf16, int8
// and onebit here, topk and randomk in sparse_codecs_gpu.cu.cc, and the dispatch. Each
// function mirrors its CPU twin in float_codecs.cc or quantize.cc; read them side by side. Float arithmetic is spelled with the _rn intrinsics so that no compiler flag
// can fuse or reorder it.
#include <cstdint>
#include <string>
#include <vector>

#include "tf_ps_ops/cc/codec/codec_gpu.h"
#include "tf_ps_ops/cc/codec/codec_gpu_internal.h"
#include "tf_ps_ops/cc/common/cuda_status.h"

namespace tfps {
namespace gpu {
namespace {

// ---- fp16 / bf16 (float_codecs.cc) --------------------------------------------------------

__device__ uint16_t FloatToHalf(float f) {
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = __fmul_rn(__fmul_rn(fabsf(f), scale_to_inf), scale_to_zero);
  const uint32_t w = Bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xff000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = __fadd_rn(FromBits((bias >> 1) + 0x07800000u), base);
  const uint32_t bits = Bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007c00u;
  const uint32_t mantissa_bits = bits & 0x00000fffu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xff000000u ? 0x7e00u : nonsign));
}

__device__ float HalfToFloat(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normalized = __fmul_rn(FromBits((two_w >> 4) + (0xe0u << 23)), 0x1.0p-112f);
  const float denormalized = __fsub_rn(FromBits((two_w >> 17) | (126u << 23)), 0.5f);
  return FromBits(sign | (two_w < (1u << 27) ? Bits(denormalized) : Bits(normalized)));
}

__device__ uint16_t FloatToBFloat16(float f) {
  const uint32_t u = Bits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  return static_cast<uint16_t>(nan ? ((u >> 16) | 0x0040u) : rounded);
}

__global__ void EncodeHalfKernel(const float* in, uint64_t n, bool bf16, uint16_t* out) {
  const uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i < n) out[i] = bf16 ? FloatToBFloat16(in[i]) : FloatToHalf(in[i]);
}

__global__ void DecodeHalfKernel(const uint16_t* in, uint64_t n, bool bf16, float* out) {
  const uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i < n) out[i] = bf16 ? FromBits(static_cast<uint32_t>(in[i]) << 16) : HalfToFloat(in[i]);
}

// ---- int8 and onebit (quantize.cc): one block per chunk of kChunk elements -----------------

__device__ bool IsFinite(float x) { return (Bits(x) & 0x7f800000u) != 0x7f800000u; }

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
    lo = fminf(lo, x[i]);  // order-free: min and max of finite floats are exact
    hi = fmaxf(hi, x[i]);
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
      lo_s[threadIdx.x] = fminf(lo_s[threadIdx.x], lo_s[threadIdx.x + stride]);
      hi_s[threadIdx.x] = fmaxf(hi_s[threadIdx.x], hi_s[threadIdx.x + stride]);
    }
    __syncthreads();
  }
  lo = lo_s[0];
  hi = hi_s[0];
  __syncthreads();  // every thread has read them before thread 0 may rewrite them below
  // ±0 compare equal, and fminf/fmaxf may return either: zeros of both signs quantise
  // alike, but the stored min/max bits would differ from the CPU's. Settle a chunk whose
  // extreme is a zero as the CPU loop does.
  if (lo == 0.0f || hi == 0.0f) {
    // The CPU keeps, per lane, the first minimum it met and then the lowest lane's among
    // equals via min_element: for zeros that is the sign of the earliest zero in a fixed
    // lane order. Recompute exactly that sequentially (rare: only chunks whose extreme is 0).
    if (threadIdx.x == 0) {
      float l[8], h[8];
      for (int j = 0; j < 8; ++j) l[j] = h[j] = x[0];
      uint64_t i = 0;
      for (; i + 8 <= len; i += 8) {
        for (int j = 0; j < 8; ++j) {
          l[j] = x[i + j] < l[j] ? x[i + j] : l[j];
          h[j] = x[i + j] > h[j] ? x[i + j] : h[j];
        }
      }
      for (; i < len; ++i) {
        l[0] = x[i] < l[0] ? x[i] : l[0];
        h[0] = x[i] > h[0] ? x[i] : h[0];
      }
      float ml = l[0], mh = h[0];
      for (int j = 1; j < 8; ++j) {  // std::min_element / max_element: first of equals
        if (l[j] < ml) ml = l[j];
        if (mh < h[j]) mh = h[j];
      }
      lo_s[0] = ml;
      hi_s[0] = mh;
    }
    __syncthreads();
    lo = lo_s[0];
    hi = hi_s[0];
  }
  const float inv = hi > lo ? __fdiv_rn(255.0f, __fsub_rn(hi, lo)) : 0.0f;
  for (uint64_t i = threadIdx.x; i < len; i += blockDim.x) {
    // std::min(a, 255) as the CPU has it: a NaN (0 * Inf, when hi - lo is so small that
    // 255 / (hi - lo) overflows) stays NaN, where fminf would give 255; NaN then converts
    // to a code of 0 on both (x86's INT_MIN, CUDA's 0: the low byte is 0 either way).
    const float a = __fadd_rn(__fmul_rn(__fsub_rn(x[i], lo), inv), 0.5f);
    const float v = 255.0f < a ? 255.0f : a;
    q[i] = static_cast<uint8_t>(static_cast<int32_t>(v));
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
  const float step = __fdiv_rn(__fsub_rn(hi, lo), 255.0f);
  out[i] = __fadd_rn(lo, __fmul_rn(static_cast<float>(in[8 * chunks + i]), step));
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
  if (threadIdx.x < 8) {
    const uint64_t whole = len - len % 8;
    float acc = 0.0f;
    for (uint64_t i = threadIdx.x; i < whole; i += 8) acc = __fadd_rn(acc, fabsf(x[i]));
    if (threadIdx.x == 0) {
      for (uint64_t i = whole; i < len; ++i) acc = __fadd_rn(acc, fabsf(x[i]));
    }
    lanes[threadIdx.x] = acc;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int j = 0; j < 8; ++j) sum = __fadd_rn(sum, lanes[j]);
    scales[c] = all_finite ? __fdiv_rn(sum, static_cast<float>(len))
                           : __int_as_float(0x7fc00000);
  }
}

__global__ void OneBitSignsKernel(const float* in, uint64_t n, uint8_t* bits) {
  const uint64_t b = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (b >= (n + 7) / 8) return;
  uint32_t byte = 0;
  for (uint64_t t = 0; t < 8 && 8 * b + t < n; ++t) {
    byte |= static_cast<uint32_t>(in[8 * b + t] < 0.0f) << t;
  }
  bits[b] = static_cast<uint8_t>(byte);
}

__global__ void DecodeOneBitKernel(const uint8_t* in, uint64_t n, float* out) {
  const uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const uint64_t chunks = (n + kChunk - 1) / kChunk;
  const uint32_t scale = Bits(reinterpret_cast<const float*>(in)[i / kChunk]);
  const uint8_t* bits = in + 4 * chunks;
  out[i] = FromBits(scale ^ (((bits[i / 8] >> (i % 8)) & 1u) << 31));
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

}  // namespace gpu
}  // namespace tfps

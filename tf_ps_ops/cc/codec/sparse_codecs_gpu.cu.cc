// topk and randomk on the GPU (codec_gpu.h says why they match the CPU's): each function
// mirrors its twin in sparse_codecs.cc. Both write the kept elements in ascending index order.
#include <cub/device/device_scan.cuh>

#include <cstdint>
#include <string>
#include <vector>

#include "tf_ps_ops/cc/codec/codec.h"
#include "tf_ps_ops/cc/codec/codec_gpu_internal.h"
#include "tf_ps_ops/cc/codec/codec_math.h"
#include "tf_ps_ops/cc/codec/codec_internal.h"
#include "tf_ps_ops/cc/common/cuda_status.h"

namespace tfps {
namespace gpu {
namespace {

__device__ uint32_t Key(float x) { return codec_math::TopKKey(x); }  // codec_math.h

// Counts the keys under `prefix` (on the bits of `prefix_mask`) by their bits at `shift`.
__global__ void HistogramKernel(const float* in, uint64_t n, uint32_t prefix,
                                uint32_t prefix_mask, int shift, uint32_t buckets,
                                unsigned long long* histogram) {
  const uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const uint32_t key = Key(in[i]);
  if ((key & prefix_mask) == prefix) atomicAdd(&histogram[(key >> shift) & (buckets - 1)], 1ull);
}

// take[i]: 1 above the threshold; at it, 1 for the first `ties` (in index order), counted
// by an exclusive scan of `equal` already in `take`.
__global__ void FlagEqualKernel(const float* in, uint64_t n, uint32_t threshold, uint32_t* flags) {
  const uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i < n) flags[i] = Key(in[i]) == threshold;
}

__global__ void FlagTakeKernel(const float* in, uint64_t n, uint32_t threshold, uint64_t ties,
                               const uint32_t* equal_before, uint32_t* take) {
  const uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const uint32_t key = Key(in[i]);
  take[i] = key > threshold || (key == threshold && equal_before[i] < ties);
}

__global__ void ScatterTopKKernel(const float* in, uint64_t n, uint64_t k, const uint32_t* take,
                                  const uint32_t* position, uint8_t* out) {
  const uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (i >= n || !take[i]) return;
  reinterpret_cast<uint32_t*>(out)[position[i]] = static_cast<uint32_t>(i);
  reinterpret_cast<float*>(out + 4 * k)[position[i]] = in[i];
}

__global__ void DecodeTopKKernel(const uint8_t* in, uint64_t n, uint64_t k, float* out) {
  const uint64_t m = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (m >= k) return;
  const uint32_t index = reinterpret_cast<const uint32_t*>(in)[m];
  // Indices come from the network: one out of range is dropped, never written. Duplicates
  // (only in a hostile payload) may land in any order; the CPU keeps the last.
  if (index < n) out[index] = reinterpret_cast<const float*>(in + 4 * k)[m];
}

__global__ void GatherKernel(const float* in, const uint32_t* indices, uint64_t k, float* out) {
  const uint64_t m = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (m < k) out[m] = in[indices[m]];
}

__global__ void ScatterKernel(const float* values, const uint32_t* indices, uint64_t k,
                              float* out) {
  const uint64_t m = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x;
  if (m < k) out[indices[m]] = values[m];
}

// Device scratch for one call, freed on the stream when the call's work is done.
class Scratch {
 public:
  explicit Scratch(cudaStream_t stream) : stream_(stream) {}
  ~Scratch() {
    for (void* p : blocks_) cudaFreeAsync(p, stream_);
  }
  template <typename T>
  Status Get(uint64_t count, T** out, const std::string& what) {
    void* p = nullptr;
    TFPS_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&p, count * sizeof(T) + 1, stream_), what);
    blocks_.push_back(p);
    *out = static_cast<T*>(p);
    return Status::Ok();
  }

 private:
  cudaStream_t stream_;
  std::vector<void*> blocks_;
};

// The k-th largest key of in[0, n), as KthLargest in sparse_codecs.cc (same levels and
// buckets), and how many keys equal to it are kept (`ties`).
Status KthLargestOnDevice(const float* in, uint64_t n, uint64_t k, cudaStream_t stream,
                          Scratch* scratch, uint32_t* threshold, uint64_t* ties) {
  const int shifts[3] = {21, 10, 0};
  const uint32_t widths[3] = {2048, 2048, 1024};
  unsigned long long* histogram = nullptr;
  TFPS_RETURN_IF_ERROR(scratch->Get(2048, &histogram, "topk histogram"));
  std::vector<unsigned long long> host(2048);
  uint32_t prefix = 0, prefix_mask = 0;
  for (int level = 0; level < 3; ++level) {
    const uint32_t buckets = widths[level];
    TFPS_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(histogram, 0, buckets * sizeof(unsigned long long), stream), "topk");
    HistogramKernel<<<Blocks(n), kThreads, 0, stream>>>(in, n, prefix, prefix_mask,
                                                        shifts[level], buckets, histogram);
    TFPS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.data(), histogram,
                                              buckets * sizeof(unsigned long long),
                                              cudaMemcpyDeviceToHost, stream),
                              "topk histogram");
    TFPS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "topk radix select");
    uint32_t bucket = buckets - 1;
    while (host[bucket] < k) k -= host[bucket--];
    prefix |= bucket << shifts[level];
    prefix_mask |= (buckets - 1) << shifts[level];
  }
  *threshold = prefix;
  *ties = k;  // the keys above the threshold were counted off k on the way down
  return Status::Ok();
}

Status ExclusiveSum(const uint32_t* in, uint32_t* out, uint64_t n, cudaStream_t stream,
                    Scratch* scratch) {
  size_t bytes = 0;
  TFPS_CUDA_RETURN_IF_ERROR(
      cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, static_cast<int>(n), stream),
      "topk scan size");
  uint8_t* temp = nullptr;
  TFPS_RETURN_IF_ERROR(scratch->Get(bytes, &temp, "topk scan"));
  TFPS_CUDA_RETURN_IF_ERROR(
      cub::DeviceScan::ExclusiveSum(temp, bytes, in, out, static_cast<int>(n), stream),
      "topk scan");
  return Status::Ok();
}

// randomk's indices, on the device for the duration of the stream's work.
Status RandomKIndicesOnDevice(uint64_t n, uint64_t k, uint64_t seed, cudaStream_t stream,
                              Scratch* scratch, uint32_t** indices) {
  const std::vector<uint32_t> host = codec_internal::RandomKIndices(n, k, seed);
  TFPS_RETURN_IF_ERROR(scratch->Get(k, indices, "randomk indices"));
  // From pageable memory: the call returns once `host` has been read.
  TFPS_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(*indices, host.data(), 4 * k,
                                            cudaMemcpyHostToDevice, stream),
                            "randomk indices");
  return Status::Ok();
}

}  // namespace

Status EncodeTopK(const float* in, uint64_t n, uint64_t k, uint8_t* out, cudaStream_t stream) {
  if (k == 0) return Status::Ok();
  Scratch scratch(stream);
  uint32_t threshold = 0;
  uint64_t ties = 0;
  TFPS_RETURN_IF_ERROR(KthLargestOnDevice(in, n, k, stream, &scratch, &threshold, &ties));
  uint32_t *equal = nullptr, *equal_before = nullptr, *take = nullptr, *position = nullptr;
  TFPS_RETURN_IF_ERROR(scratch.Get(n, &equal, "topk flags"));
  TFPS_RETURN_IF_ERROR(scratch.Get(n, &equal_before, "topk flags"));
  TFPS_RETURN_IF_ERROR(scratch.Get(n, &take, "topk flags"));
  TFPS_RETURN_IF_ERROR(scratch.Get(n, &position, "topk flags"));
  FlagEqualKernel<<<Blocks(n), kThreads, 0, stream>>>(in, n, threshold, equal);
  TFPS_RETURN_IF_ERROR(ExclusiveSum(equal, equal_before, n, stream, &scratch));
  FlagTakeKernel<<<Blocks(n), kThreads, 0, stream>>>(in, n, threshold, ties, equal_before, take);
  TFPS_RETURN_IF_ERROR(ExclusiveSum(take, position, n, stream, &scratch));
  ScatterTopKKernel<<<Blocks(n), kThreads, 0, stream>>>(in, n, k, take, position, out);
  return CudaStatus(cudaGetLastError(), "topk encode");
}

Status DecodeTopK(const uint8_t* in, uint64_t n, uint64_t k, float* out, cudaStream_t stream) {
  TFPS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out, 0, 4 * n, stream), "topk decode");
  DecodeTopKKernel<<<Blocks(k), kThreads, 0, stream>>>(in, n, k, out);
  return CudaStatus(cudaGetLastError(), "topk decode");
}

Status EncodeRandomK(const float* in, uint64_t n, uint64_t k, uint64_t seed, uint8_t* out,
                     cudaStream_t stream) {
  Scratch scratch(stream);
  uint32_t* indices = nullptr;
  TFPS_RETURN_IF_ERROR(RandomKIndicesOnDevice(n, k, seed, stream, &scratch, &indices));
  GatherKernel<<<Blocks(k), kThreads, 0, stream>>>(in, indices, k, reinterpret_cast<float*>(out));
  return CudaStatus(cudaGetLastError(), "randomk encode");
}

Status DecodeRandomK(const uint8_t* in, uint64_t n, uint64_t k, uint64_t seed, float* out,
                     cudaStream_t stream) {
  TFPS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(out, 0, 4 * n, stream), "randomk decode");
  Scratch scratch(stream);
  uint32_t* indices = nullptr;
  TFPS_RETURN_IF_ERROR(RandomKIndicesOnDevice(n, k, seed, stream, &scratch, &indices));
  ScatterKernel<<<Blocks(k), kThreads, 0, stream>>>(reinterpret_cast<const float*>(in), indices,
                                                    k, out);
  return CudaStatus(cudaGetLastError(), "randomk decode");
}

}  // namespace gpu
}  // namespace tfps

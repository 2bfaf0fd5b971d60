// gpu_push_codec.h: the engine's DeviceCodec on a CUDA device.
#include "tf_ps_ops/kernels/gpu_push_codec.h"

#if TFPS_WITH_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "tf_ps_ops/cc/codec/codec_gpu.h"
#include "tf_ps_ops/cc/common/cuda_status.h"

namespace tfps {
namespace {

uint64_t Align4(uint64_t n) { return (n + 3) & ~uint64_t{3}; }

// A device buffer that only grows (freed with the process).
struct DeviceBuffer {
  void* ptr = nullptr;
  uint64_t bytes = 0;
  Status Reserve(uint64_t want, const std::string& what) {
    if (want <= bytes) return Status::Ok();
    if (ptr != nullptr) cudaFree(ptr);
    ptr = nullptr;
    bytes = 0;
    const cudaError_t err = cudaMalloc(&ptr, want);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it
      return FailedPrecondition(what + ": " + std::to_string(want) + " bytes: out of GPU "
                                "memory outside TensorFlow's pool; let TensorFlow grow its "
                                "pool instead of taking the GPU at start "
                                "(tf.config.experimental.set_memory_growth, or "
                                "TF_FORCE_GPU_ALLOW_GROWTH=true), or compress on the CPU "
                                "(keep the tensor on the CPU)");
    }
    TFPS_CUDA_RETURN_IF_ERROR(err, what);
    bytes = want;
    return Status::Ok();
  }
};

// Per device: the stream our codec work runs on, scratch, residuals. Used from the engine
// thread (one at a time); the mutex is for safety, not contention.
struct DeviceState {
  cudaStream_t stream = nullptr;
  DeviceBuffer encoded;   // every partition's encoded bytes (4-aligned), or the replies
  DeviceBuffer decoded;   // feedback's D(C(p)) of one partition
  std::map<std::pair<uint64_t, uint32_t>, DeviceBuffer> residuals;  // (key, partition)
  std::map<std::pair<uint64_t, uint32_t>, uint64_t> residual_count;
};

std::mutex g_mu;
std::map<int, DeviceState>* g_devices = new std::map<int, DeviceState>();  // never freed
// Pinned host buffers, reused: capacity -> free buffers (g_pinned_mu: a holder lets go on
// ZeroMQ's thread).
std::mutex g_pinned_mu;
std::multimap<uint64_t, void*>* g_pinned_free = new std::multimap<uint64_t, void*>();

Status StateOf(int device, DeviceState** state) {
  // Called with g_mu held.
  DeviceState& s = (*g_devices)[device];
  if (s.stream == nullptr) {
    TFPS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking),
                              "creating the GPU codec's stream on device " +
                                  std::to_string(device));
  }
  *state = &s;
  return Status::Ok();
}

// A pinned host buffer of at least `bytes`, handed back to the pool when the last holder
// (ZeroMQ, the request) lets go.
Status Pinned(uint64_t bytes, std::shared_ptr<void>* out) {
  uint64_t capacity = 4096;
  while (capacity < bytes) capacity *= 2;
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_pinned_mu);
    auto it = g_pinned_free->find(capacity);
    if (it != g_pinned_free->end()) {
      ptr = it->second;
      g_pinned_free->erase(it);
    }
  }
  if (ptr == nullptr) {
    TFPS_CUDA_RETURN_IF_ERROR(cudaMallocHost(&ptr, capacity),
                              "pinned memory for " + std::to_string(bytes) + " encoded bytes");
  }
  *out = std::shared_ptr<void>(ptr, [capacity](void* p) {
    std::lock_guard<std::mutex> lock(g_pinned_mu);
    g_pinned_free->emplace(capacity, p);
  });
  return Status::Ok();
}

}  // namespace

GpuPushCodec::GpuPushCodec(std::string name, int device, const float* input, float* output,
                           uint64_t count, void* ready)
    : name_(std::move(name)), device_(device), input_(input), output_(output), count_(count),
      ready_(ready) {}

Status GpuPushCodec::EncodeParts(const CodecSpec& spec, bool feedback, uint64_t key,
                                 uint64_t step, const std::vector<Partition>& parts,
                                 std::vector<HostBytes>* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  TFPS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "selecting GPU " + std::to_string(device_));
  DeviceState* state = nullptr;
  TFPS_RETURN_IF_ERROR(StateOf(device_, &state));
  cudaStream_t stream = state->stream;
  std::vector<uint64_t> offsets(parts.size()), sizes(parts.size());
  uint64_t total = 0, largest = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const uint64_t n = parts[i].count;
    if (parts[i].offset + n > count_) return Internal("a partition past the tensor's end");
    sizes[i] = EncodedBytes(spec.id, n, SparseK(spec.ratio, n));
    offsets[i] = total;
    total += Align4(sizes[i]);
    largest = std::max(largest, n);
  }
  TFPS_RETURN_IF_ERROR(state->encoded.Reserve(std::max<uint64_t>(total, 4),
                                              "GPU memory for the encoded partitions"));
  const bool keeps = feedback && CodecWantsErrorFeedback(spec.id);
  if (keeps) {
    TFPS_RETURN_IF_ERROR(state->decoded.Reserve(4 * std::max<uint64_t>(largest, 1),
                                                "GPU memory for error feedback"));
  }
  if (ready_ != nullptr) {  // the gradient's producers on TF's stream
    TFPS_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(ready_), 0),
                              "waiting for the gradient");
  }
  uint8_t* device_bytes = static_cast<uint8_t*>(state->encoded.ptr);
  replies_.assign(parts.size(), Reply());
  for (size_t i = 0; i < parts.size(); ++i) {
    const Partition& p = parts[i];
    const uint64_t k = SparseK(spec.ratio, p.count);
    const uint64_t seed = RandomKSeed(key, p.index, step);
    replies_[p.index].offset = p.offset;
    replies_[p.index].count = p.count;
    if (!keeps) {
      TFPS_RETURN_IF_ERROR(gpu::EncodeOnDevice(spec.id, input_ + p.offset, p.count, k, seed,
                                               device_bytes + offsets[i], stream));
      continue;
    }
    const auto slot = std::make_pair(key, p.index);
    DeviceBuffer& e = state->residuals[slot];
    uint64_t& e_count = state->residual_count[slot];
    if (e.ptr == nullptr || e_count != p.count) {  // new, or the tensor changed shape
      TFPS_RETURN_IF_ERROR(e.Reserve(4 * std::max<uint64_t>(p.count, 1),
                                     "GPU memory for the error-feedback residual"));
      TFPS_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(e.ptr, 0, 4 * p.count, stream),
                                "zeroing a residual");
      e_count = p.count;
    }
    TFPS_RETURN_IF_ERROR(gpu::EncodeFeedbackOnDevice(
        spec.id, input_ + p.offset, static_cast<float*>(e.ptr), p.count, k, seed,
        device_bytes + offsets[i], static_cast<float*>(state->decoded.ptr), stream));
  }
  std::shared_ptr<void> host;
  TFPS_RETURN_IF_ERROR(Pinned(std::max<uint64_t>(total, 4), &host));
  if (total > 0) {
    TFPS_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host.get(), device_bytes, total, cudaMemcpyDeviceToHost, stream),
        "copying the encoded partitions to the host");
  }
  TFPS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "encoding on the GPU");
  out->clear();
  out->resize(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    (*out)[parts[i].index] =
        HostBytes{static_cast<const uint8_t*>(host.get()) + offsets[i], sizes[i], host};
  }
  return Status::Ok();
}

Status GpuPushCodec::TakeReply(CodecId id, const Partition& part, uint64_t k, uint64_t seed,
                               const void* payload, uint64_t size) {
  if (part.index >= replies_.size()) return Internal("a reply for an unknown partition");
  Reply& r = replies_[part.index];
  r.id = id;
  r.k = k;
  r.seed = seed;
  const uint8_t* bytes = static_cast<const uint8_t*>(payload);
  r.bytes.assign(bytes, bytes + size);
  r.taken = true;
  return Status::Ok();
}

Status GpuPushCodec::DecodeInto() {
  std::lock_guard<std::mutex> lock(g_mu);
  uint64_t total = 0;
  std::vector<uint64_t> offsets(replies_.size());
  for (size_t i = 0; i < replies_.size(); ++i) {
    if (!replies_[i].taken) {
      return Internal("'" + name_ + "': partition " + std::to_string(i) + " has no answer");
    }
    offsets[i] = total;
    total += Align4(replies_[i].bytes.size());
  }
  if (replies_.empty()) return Status::Ok();
  TFPS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "selecting GPU " + std::to_string(device_));
  DeviceState* state = nullptr;
  TFPS_RETURN_IF_ERROR(StateOf(device_, &state));
  cudaStream_t stream = state->stream;
  TFPS_RETURN_IF_ERROR(state->encoded.Reserve(std::max<uint64_t>(total, 4),
                                              "GPU memory for the encoded answers"));
  std::shared_ptr<void> host;
  TFPS_RETURN_IF_ERROR(Pinned(std::max<uint64_t>(total, 4), &host));
  for (size_t i = 0; i < replies_.size(); ++i) {
    if (!replies_[i].bytes.empty()) {
      std::memcpy(static_cast<uint8_t*>(host.get()) + offsets[i], replies_[i].bytes.data(),
                  replies_[i].bytes.size());
    }
  }
  uint8_t* device_bytes = static_cast<uint8_t*>(state->encoded.ptr);
  if (total > 0) {
    TFPS_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(device_bytes, host.get(), total, cudaMemcpyHostToDevice, stream),
        "copying the encoded answers to the GPU");
  }
  for (size_t i = 0; i < replies_.size(); ++i) {
    const Reply& r = replies_[i];
    TFPS_RETURN_IF_ERROR(gpu::DecodeOnDevice(r.id, device_bytes + offsets[i], r.count, r.k,
                                             r.seed, output_ + r.offset, stream));
  }
  // `host` must outlive the copy, and the output must be whole before done().
  TFPS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "decoding on the GPU");
  return Status::Ok();
}

uint64_t GpuCodecResidentBytes() {
  std::lock_guard<std::mutex> lock(g_mu);
  uint64_t bytes = 0;
  for (const auto& kv : *g_devices) {
    bytes += kv.second.encoded.bytes + kv.second.decoded.bytes;
    for (const auto& r : kv.second.residuals) bytes += r.second.bytes;
  }
  return bytes;
}

}  // namespace tfps

#endif  // TFPS_WITH_CUDA

// C functions over the CUDA code for tests/gpu/gpu_checks.py (ctypes): host buffers in and
// out, each call copying to the GPU, running, and copying back, so that the checks compare
// GPU and CPU results byte for byte with NumPy. Linked only into build/native's
// _tfps_gpu_checks.so (tools/native_build.py, build_gpu_checks), never into the op library.
// Every function returns 0, or -1 with a message in `err` (`err_len` bytes).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tf_ps_ops/cc/codec/codec.h"
#include "tf_ps_ops/cc/codec/codec_gpu.h"
#include "tf_ps_ops/cc/codec/error_feedback.h"
#include "tf_ps_ops/cc/common/cuda_status.h"
#include "tf_ps_ops/cc/gpu/nccl_local.h"
#include "tf_ps_ops/cc/gpu/sfb_rebuild.h"
#include "tf_ps_ops/cc/gpu/staging_probe.h"

namespace tfps {
namespace {

int Report(const Status& s, char* err, size_t err_len) {
  if (s.ok()) return 0;
  if (err != nullptr && err_len > 0) std::snprintf(err, err_len, "%s", s.ToString().c_str());
  return -1;
}

// A device buffer freed when it goes out of scope.
struct DeviceBuffer {
  void* p = nullptr;
  ~DeviceBuffer() {
    if (p != nullptr) cudaFree(p);
  }
  Status Alloc(size_t bytes) {
    return CudaStatus(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
  }
};

Status Upload(DeviceBuffer* d, const void* host, size_t bytes) {
  TFPS_RETURN_IF_ERROR(d->Alloc(bytes));
  if (bytes == 0) return Status::Ok();
  return CudaStatus(cudaMemcpy(d->p, host, bytes, cudaMemcpyHostToDevice), "upload");
}

Status Download(void* host, const DeviceBuffer& d, size_t bytes) {
  TFPS_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize(), "kernel");
  if (bytes == 0) return Status::Ok();
  return CudaStatus(cudaMemcpy(host, d.p, bytes, cudaMemcpyDeviceToHost), "download");
}

template <typename T>
Status Rebuild(const T* rows, int64_t ktot, int64_t m, int64_t n, T divisor, T* g) {
  DeviceBuffer d_rows, d_g;
  TFPS_RETURN_IF_ERROR(Upload(&d_rows, rows, sizeof(T) * ktot * (m + n)));
  TFPS_RETURN_IF_ERROR(d_g.Alloc(sizeof(T) * m * n));
  TFPS_RETURN_IF_ERROR(gpu::SfbRebuild(static_cast<const T*>(d_rows.p), ktot, m, n, divisor,
                                       static_cast<T*>(d_g.p), nullptr));
  return Download(g, d_g, sizeof(T) * m * n);
}

}  // namespace
}  // namespace tfps

extern "C" {

int tfps_gpu_device_count() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

uint64_t tfps_checks_encoded_bytes(int codec, uint64_t n, uint64_t k) {
  return tfps::EncodedBytes(static_cast<tfps::CodecId>(codec), n, k);
}

int tfps_cpu_encode(int codec, const float* in, uint64_t n, uint64_t k, uint64_t seed,
                    uint8_t* out, char* err, size_t err_len) {
  return tfps::Report(tfps::Encode(static_cast<tfps::CodecId>(codec), in, n, k, seed, out), err,
                      err_len);
}

int tfps_cpu_decode(int codec, const uint8_t* in, uint64_t n, uint64_t k, uint64_t seed,
                    float* out, char* err, size_t err_len) {
  return tfps::Report(tfps::Decode(static_cast<tfps::CodecId>(codec), in, n, k, seed, out), err,
                      err_len);
}

int tfps_gpu_encode(int codec, const float* in, uint64_t n, uint64_t k, uint64_t seed,
                    uint8_t* out, char* err, size_t err_len) {
  using namespace tfps;  // NOLINT
  const CodecId id = static_cast<CodecId>(codec);
  const uint64_t bytes = EncodedBytes(id, n, k);
  DeviceBuffer d_in, d_out;
  Status s = Upload(&d_in, in, 4 * n);
  if (s.ok()) s = d_out.Alloc(bytes);
  if (s.ok()) s = gpu::EncodeOnDevice(id, static_cast<const float*>(d_in.p), n, k, seed,
                                      static_cast<uint8_t*>(d_out.p), nullptr);
  if (s.ok()) s = Download(out, d_out, bytes);
  return Report(s, err, err_len);
}

// `steps` steps of error feedback on one (key, partition): in holds steps x n floats (one
// gradient per step), out steps x EncodedBytes(codec, n, k) bytes, residual n floats (the
// residual after the last step); seeds RandomKSeed(7, 3, step + 1). CPU: ErrorFeedback;
// GPU: EncodeFeedbackOnDevice with the residual kept on the device between steps.
int tfps_cpu_encode_feedback(int codec, const float* in, uint64_t n, uint64_t k, int steps,
                             uint8_t* out, float* residual, char* err, size_t err_len) {
  using namespace tfps;  // NOLINT
  const CodecId id = static_cast<CodecId>(codec);
  const uint64_t bytes = EncodedBytes(id, n, k);
  ErrorFeedback ef;
  Status s;
  for (int t = 0; s.ok() && t < steps; ++t) {
    s = ef.Encode(7, 3, id, in + n * t, n, k, RandomKSeed(7, 3, t + 1), out + bytes * t);
  }
  const std::vector<float> e = ef.Residual(7, 3);
  for (uint64_t i = 0; i < n; ++i) residual[i] = e.size() == n ? e[i] : 0.0f;
  return Report(s, err, err_len);
}

int tfps_gpu_encode_feedback(int codec, const float* in, uint64_t n, uint64_t k, int steps,
                             uint8_t* out, float* residual, char* err, size_t err_len) {
  using namespace tfps;  // NOLINT
  const CodecId id = static_cast<CodecId>(codec);
  const uint64_t bytes = EncodedBytes(id, n, k);
  DeviceBuffer d_in, d_out, d_e, d_scratch;
  Status s = Upload(&d_in, in, 4 * n * steps);
  if (s.ok()) s = d_out.Alloc(bytes * steps + 4);
  if (s.ok()) s = d_scratch.Alloc(4 * n);
  const std::vector<float> zeros(n, 0.0f);
  if (s.ok()) s = Upload(&d_e, zeros.data(), 4 * n);
  // Each step's bytes at a 4-aligned offset, copied out one by one.
  DeviceBuffer d_step;
  if (s.ok()) s = d_step.Alloc(bytes + 4);
  for (int t = 0; s.ok() && t < steps; ++t) {
    s = gpu::EncodeFeedbackOnDevice(id, static_cast<const float*>(d_in.p) + n * t,
                                    static_cast<float*>(d_e.p), n, k, RandomKSeed(7, 3, t + 1),
                                    static_cast<uint8_t*>(d_step.p),
                                    static_cast<float*>(d_scratch.p), nullptr);
    if (s.ok()) s = Download(out + bytes * t, d_step, bytes);
  }
  if (s.ok()) s = Download(residual, d_e, 4 * n);
  return Report(s, err, err_len);
}

int tfps_gpu_decode(int codec, const uint8_t* in, uint64_t n, uint64_t k, uint64_t seed,
                    float* out, char* err, size_t err_len) {
  using namespace tfps;  // NOLINT
  const CodecId id = static_cast<CodecId>(codec);
  DeviceBuffer d_in, d_out;
  Status s = Upload(&d_in, in, EncodedBytes(id, n, k));
  if (s.ok()) s = d_out.Alloc(4 * n);
  if (s.ok()) s = gpu::DecodeOnDevice(id, static_cast<const uint8_t*>(d_in.p), n, k, seed,
                                      static_cast<float*>(d_out.p), nullptr);
  if (s.ok()) s = Download(out, d_out, 4 * n);
  return Report(s, err, err_len);
}

int tfps_gpu_sfb_rebuild_f32(const float* rows, int64_t ktot, int64_t m, int64_t n,
                             float divisor, float* g, char* err, size_t err_len) {
  return tfps::Report(tfps::Rebuild(rows, ktot, m, n, divisor, g), err, err_len);
}

int tfps_gpu_sfb_rebuild_f64(const double* rows, int64_t ktot, int64_t m, int64_t n,
                             double divisor, double* g, char* err, size_t err_len) {
  return tfps::Report(tfps::Rebuild(rows, ktot, m, n, divisor, g), err, err_len);
}

// out: compute-only, copy-only, serial (one stream), overlapped (staging stream) ms.
int tfps_gpu_staging_overlap(uint64_t bytes_per_layer, int layers, int compute_iters,
                             double* out, char* err, size_t err_len) {
  return tfps::Report(tfps::gpu::StagingOverlapProbe(bytes_per_layer, layers, compute_iters,
                                                     &out[0], &out[1], &out[2], &out[3]),
                      err, err_len);
}

int tfps_gpu_nccl_load(const char* path, char* err, size_t err_len) {
  return tfps::Report(tfps::gpu::NcclLocalGroup::Load(path == nullptr ? "" : path), err,
                      err_len);
}

int tfps_gpu_nccl_version() { return tfps::gpu::NcclLocalGroup::Version(); }

// A group of one on GPU 0 (one GPU cannot hold two ranks of a communicator): the leader's
// reduce and broadcast of `count` floats must return them unchanged.
int tfps_gpu_nccl_single_rank(const float* in, uint64_t count, float* out, char* err,
                              size_t err_len) {
  using namespace tfps;  // NOLINT
  std::string id;
  std::unique_ptr<gpu::NcclLocalGroup> group;
  DeviceBuffer d_buf, d_sum;
  cudaStream_t stream = nullptr;
  Status s = gpu::NcclLocalGroup::NewUniqueId(&id);
  if (s.ok()) s = gpu::NcclLocalGroup::Create(id, 0, 1, 0, 60.0, &group);
  if (s.ok()) s = CudaStatus(cudaStreamCreate(&stream), "stream");
  if (s.ok()) s = Upload(&d_buf, in, 4 * count);
  if (s.ok()) s = d_sum.Alloc(4 * count);
  if (s.ok()) s = group->ReduceToLeader(d_buf.p, d_sum.p, count, gpu::NcclType::kFloat32,
                                        stream, 60.0);
  if (s.ok()) s = group->BroadcastFromLeader(d_sum.p, count, gpu::NcclType::kFloat32, stream,
                                             60.0);
  if (s.ok()) s = Download(out, d_sum, 4 * count);
  if (stream != nullptr) cudaStreamDestroy(stream);
  return Report(s, err, err_len);
}

}  // extern "C"

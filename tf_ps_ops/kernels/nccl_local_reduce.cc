// nccl_local_reduce.h: NCCL under the LocalReduce interface, and the hooks that offer it to
// the engine (device_reduce.h).
#include "tf_ps_ops/kernels/nccl_local_reduce.h"

#if TFPS_WITH_CUDA

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <chrono>
#include <cstring>
#include <utility>

#include "tf_ps_ops/cc/common/cuda_status.h"
#include "tf_ps_ops/cc/engine/local/device_reduce.h"

namespace tfps {

struct NcclLocalReduce::Header {
  static constexpr uint32_t kMagic = 0x7466704e;  // "Npft"
  uint32_t magic;
  uint32_t kind;
  uint64_t key;
  uint64_t step;
  uint64_t count;
  int32_t dtype;
  int32_t code;  // the leader's result of a broadcast (Status::Code)
  char message[216];
};

namespace {

bool NcclTypeOf(DType dtype, gpu::NcclType* type) {
  switch (dtype) {
    case DType::kFloat32: *type = gpu::NcclType::kFloat32; return true;
    case DType::kFloat64: *type = gpu::NcclType::kFloat64; return true;
    case DType::kInt32: *type = gpu::NcclType::kInt32; return true;
    case DType::kInt64: *type = gpu::NcclType::kInt64; return true;
    default: return false;
  }
}

}  // namespace

NcclLocalReduce::NcclLocalReduce(std::string id, std::vector<int> ranks, int local_rank,
                                 double timeout_s)
    : id_(std::move(id)), ranks_(std::move(ranks)), local_rank_(local_rank),
      timeout_s_(timeout_s) {
  static_assert(sizeof(Header) == 256, "one fixed-size NCCL broadcast");
  thread_ = std::thread([this] { RunThread(); });
}

NcclLocalReduce::~NcclLocalReduce() { Shutdown(); }

std::string NcclLocalReduce::Describe(const LocalTensor& t, const char* what) const {
  return std::string(what) + " of tensor '" + t.name + "' (call " + std::to_string(t.step) +
         ", NCCL, local rank " + std::to_string(local_rank_) + " of " +
         std::to_string(ranks_.size()) + ", rank " + std::to_string(ranks_[local_rank_]) + ")";
}

void NcclLocalReduce::Add(Op op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      pending_.push_back(std::move(op));
      wake_.notify_all();
      return;
    }
  }
  const Status aborted = Aborted("tf_ps_ops was shut down during " +
                                 Describe(op.tensor, "the local NCCL reduction"));
  if (op.reduce_done) op.reduce_done(aborted, nullptr);
  if (op.done) op.done(aborted);
}

void NcclLocalReduce::ReduceToLeader(const LocalTensor& t, const void* input, ReduceDone done) {
  Op op;
  op.kind = kReduce;
  op.tensor = t;
  op.input = input;
  op.reduce_done = std::move(done);
  Add(std::move(op));
}

void NcclLocalReduce::BroadcastFromLeader(const LocalTensor& t, const Status& result,
                                          void* output, Done done) {
  Op op;
  op.kind = kBroadcast;
  op.tensor = t;
  op.output = output;
  op.result = result;
  op.done = std::move(done);
  Add(std::move(op));
}

void NcclLocalReduce::Fail(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_.ok()) failed_ = why.ok() ? Aborted("the job cannot go on") : why;
  wake_.notify_all();
}

void NcclLocalReduce::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void NcclLocalReduce::RunThread() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
      if (stopping_) break;
    }
    Op op;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (broken_.ok() && !failed_.ok()) broken_ = failed_;
    }
    Status s = broken_;
    if (s.ok()) s = NextOnThread(&op);
    if (!s.ok()) {
      broken_ = s;  // the group's order is lost (or it never formed): fail everything
      std::deque<Op> failed;
      {
        std::lock_guard<std::mutex> lock(mu_);
        failed.swap(pending_);
      }
      if (op.reduce_done || op.done) failed.push_front(std::move(op));
      for (Op& f : failed) {
        const Status e = s.WithPrefix(Describe(f.tensor, "the local reduction") + ": ");
        if (f.reduce_done) f.reduce_done(e, nullptr);
        if (f.done) f.done(e);
      }
      continue;
    }
    void* sum = nullptr;
    Status answer;
    s = ExecuteOnThread(op, &sum, &answer);
    if (!s.ok()) {
      broken_ = s;
      s = s.WithPrefix(Describe(op.tensor, op.kind == kReduce ? "NCCL reduce" : "NCCL broadcast") +
                       ": ");
    }
    if (op.reduce_done) op.reduce_done(s, s.ok() ? sum : nullptr);
    if (op.done) op.done(s.ok() ? answer : s);
  }
  std::deque<Op> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(pending_);
  }
  for (Op& f : left) {
    const Status e = Aborted("tf_ps_ops was shut down during " +
                             Describe(f.tensor, "the local NCCL reduction"));
    if (f.reduce_done) f.reduce_done(e, nullptr);
    if (f.done) f.done(e);
  }
  ReleaseOnThread();
}

Status NcclLocalReduce::SetUpOnThread(int device) {
  if (device < 0) return Internal("a host tensor reached the NCCL reduction");
  TFPS_CUDA_RETURN_IF_ERROR(cudaSetDevice(device), "cudaSetDevice for the NCCL reduction");
  device_ = device;
  cudaStream_t stream = nullptr;
  TFPS_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                            "a CUDA stream for the NCCL reduction");
  stream_ = stream;
  TFPS_CUDA_RETURN_IF_ERROR(cudaMallocHost(reinterpret_cast<void**>(&host_header_), sizeof(Header)),
                            "pinned memory for the NCCL reduction");
  TFPS_CUDA_RETURN_IF_ERROR(cudaMalloc(&device_header_, sizeof(Header)),
                            "GPU memory for the NCCL reduction");
  return gpu::NcclLocalGroup::Create(id_, local_rank_, local_size(), device, timeout_s_, &group_);
}

Status NcclLocalReduce::NextOnThread(Op* op) {
  const int device = [this] {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_.front().tensor.device;
  }();
  if (!group_) TFPS_RETURN_IF_ERROR(SetUpOnThread(device));
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  if (local_rank_ == 0) {  // the leader's next call, in the order it came, goes first
    {
      std::lock_guard<std::mutex> lock(mu_);
      *op = std::move(pending_.front());
      pending_.pop_front();
    }
    Header& h = *host_header_;
    std::memset(&h, 0, sizeof(h));
    h.magic = Header::kMagic;
    h.kind = op->kind;
    h.key = op->tensor.key;
    h.step = op->tensor.step;
    h.count = op->tensor.count;
    h.dtype = static_cast<int32_t>(op->tensor.dtype);
    h.code = static_cast<int32_t>(op->result.code());
    std::strncpy(h.message, op->result.message().c_str(), sizeof(h.message) - 1);
    TFPS_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(device_header_, &h, sizeof(h), cudaMemcpyHostToDevice, stream),
        "the NCCL reduction's header");
    return group_->BroadcastFromLeader(device_header_, sizeof(h), gpu::NcclType::kUInt8, stream,
                                       timeout_s_);
  }
  // A member: the leader says which call is next (the wait is bounded: past it the group is
  // aborted), then that call of this worker's joins, once it is here.
  TFPS_RETURN_IF_ERROR(group_->BroadcastFromLeader(device_header_, sizeof(Header),
                                                   gpu::NcclType::kUInt8, stream, timeout_s_));
  TFPS_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host_header_, device_header_, sizeof(Header), cudaMemcpyDeviceToHost, stream),
      "the NCCL reduction's header");
  TFPS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "the NCCL reduction's header");
  const Header h = *host_header_;
  if (h.magic != Header::kMagic || (h.kind != kReduce && h.kind != kBroadcast)) {
    return Internal("the local leader's NCCL header is malformed");
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if (it->kind != h.kind || it->tensor.key != h.key || it->tensor.step != h.step) continue;
      *op = std::move(*it);
      pending_.erase(it);
      lock.unlock();
      if (op->tensor.count != h.count || static_cast<int32_t>(op->tensor.dtype) != h.dtype) {
        return InvalidArgument("this worker's tensor has " + std::to_string(op->tensor.count) +
                               " elements of type " + DTypeName(op->tensor.dtype) +
                               ", the local leader's " + std::to_string(h.count) + " of " +
                               DTypeName(static_cast<DType>(h.dtype)) +
                               ": every worker must push the same tensor under one name");
      }
      if (h.kind == kBroadcast && h.code != 0) {
        op->result = Status(static_cast<Code>(h.code), h.message);
      }
      return Status::Ok();
    }
    if (stopping_) return Aborted("tf_ps_ops was shut down");
    if (!failed_.ok()) return failed_;
    if (wake_.wait_until(lock, deadline) == std::cv_status::timeout) {
      return DeadlineExceeded(
          "the local leader (rank " + std::to_string(ranks_[0]) + ") started the NCCL " +
          (h.kind == kReduce ? "reduce" : "broadcast") + " of call " + std::to_string(h.step) +
          " of a tensor this worker did not push within " + std::to_string(timeout_s_) +
          " s (key " + std::to_string(h.key) + "): do all workers of the host place every "
          "tensor alike (all on the GPU, or TFPS_HIERARCHICAL=0)?");
    }
  }
}

Status NcclLocalReduce::ScratchOnThread(const LocalTensor& t, Scratch** out) {
  Scratch& s = scratch_[t.key];
  const uint64_t bytes = t.count * DTypeSize(t.dtype);
  if (s.bytes < bytes) {
    if (s.device != nullptr) cudaFree(s.device);
    if (s.host != nullptr) cudaFreeHost(s.host);
    s = Scratch();
    TFPS_CUDA_RETURN_IF_ERROR(cudaMalloc(&s.device, bytes), Describe(t, "GPU memory for the sum"));
    TFPS_CUDA_RETURN_IF_ERROR(cudaMallocHost(&s.host, bytes), Describe(t, "pinned memory for the sum"));
    s.bytes = bytes;
  }
  *out = &s;
  return Status::Ok();
}

Status NcclLocalReduce::ExecuteOnThread(Op& op, void** sum, Status* answer) {
  const LocalTensor& t = op.tensor;
  gpu::NcclType type;
  if (!NcclTypeOf(t.dtype, &type)) return InvalidArgument("NCCL does not sum this type here");
  cudaStream_t stream = static_cast<cudaStream_t>(stream_);
  const uint64_t bytes = t.count * DTypeSize(t.dtype);
  const bool leader = local_rank_ == 0;
  Scratch* scratch = nullptr;
  if (leader) TFPS_RETURN_IF_ERROR(ScratchOnThread(t, &scratch));
  if (op.kind == kReduce) {
    if (t.device_ready != nullptr) {  // the input's producers on TF's compute stream
      TFPS_CUDA_RETURN_IF_ERROR(
          cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(t.device_ready), 0),
          "waiting for the input");
    }
    TFPS_RETURN_IF_ERROR(group_->ReduceToLeader(op.input, leader ? scratch->device : nullptr,
                                                t.count, type, stream, timeout_s_));
    if (leader) {  // the sum goes to the servers from pinned memory
      TFPS_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(scratch->host, scratch->device, bytes, cudaMemcpyDeviceToHost, stream),
          "the local sum to the host");
      TFPS_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream), "the local sum to the host");
      *sum = scratch->host;
    }
    return Status::Ok();
  }
  // The answer: the leader's error went in the header (nothing else travels); else the
  // servers' answer, which the leader's push wrote into the scratch, from its GPU to all.
  if (!op.result.ok()) {
    *answer = op.result;
    return Status::Ok();
  }
  if (leader) {
    TFPS_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(op.output, scratch->host, bytes, cudaMemcpyHostToDevice, stream),
        "the answer to the GPU");
  }
  return group_->BroadcastFromLeader(op.output, t.count, type, stream, timeout_s_);
}

void NcclLocalReduce::ReleaseOnThread() {
  if (device_ >= 0) cudaSetDevice(device_);
  for (auto& kv : scratch_) {
    if (kv.second.device != nullptr) cudaFree(kv.second.device);
    if (kv.second.host != nullptr) cudaFreeHost(kv.second.host);
  }
  scratch_.clear();
  group_.reset();
  if (device_header_ != nullptr) cudaFree(device_header_);
  if (host_header_ != nullptr) cudaFreeHost(host_header_);
  if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  device_header_ = nullptr;
  host_header_ = nullptr;
  stream_ = nullptr;
}

Status DeviceOfPointer(const void* pointer, int* device) {
  cudaPointerAttributes attributes;
  TFPS_CUDA_RETURN_IF_ERROR(cudaPointerGetAttributes(&attributes, pointer),
                            "finding the GPU of a tensor");
  if (attributes.type != cudaMemoryTypeDevice) {
    return InvalidArgument("the tensor is not in GPU memory");
  }
  *device = attributes.device;
  return Status::Ok();
}

Status RecordReadyEvent(void* stream, void** event) {
  cudaEvent_t e = nullptr;
  TFPS_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                            "an event for the NCCL reduction");
  const cudaError_t r = cudaEventRecord(e, static_cast<cudaStream_t>(stream));
  if (r != cudaSuccess) {
    cudaEventDestroy(e);
    return CudaStatus(r, "recording the input's event");
  }
  *event = e;
  return Status::Ok();
}

void ReleaseReadyEvent(void* event) {
  if (event != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

namespace {

// Where NCCL may be: TFPS_NCCL_LIBRARY alone when set; else the dynamic linker's search
// path, then the nvidia-nccl wheel beside this package (site-packages/nvidia/nccl/lib).
std::vector<std::string> NcclCandidates(const std::string& library) {
  if (!library.empty()) return {library};
  std::vector<std::string> out = {"libnccl.so.2"};
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&NcclCandidates), &info) != 0 && info.dli_fname != nullptr) {
    std::string path = info.dli_fname;  // .../site-packages/tf_ps_ops/_tf_ps_ops.so
    for (int up = 0; up < 2 && path.find('/') != std::string::npos; ++up) {
      path = path.substr(0, path.rfind('/'));
    }
    if (!path.empty()) out.push_back(path + "/nvidia/nccl/lib/libnccl.so.2");
  }
  return out;
}

Status ProbeNccl(const std::string& library, std::string* gpu) {
  std::string tried;
  Status loaded = FailedPrecondition("no NCCL library to try");
  for (const std::string& candidate : NcclCandidates(library)) {
    loaded = gpu::NcclLocalGroup::Load(candidate);
    if (loaded.ok()) break;
    tried += (tried.empty() ? "" : "; ") + loaded.message();
  }
  if (!loaded.ok()) {
    return FailedPrecondition(tried + " (TFPS_NCCL_LIBRARY names the library)");
  }
  int devices = 0;
  const cudaError_t r = cudaGetDeviceCount(&devices);
  if (r != cudaSuccess || devices == 0) {
    return FailedPrecondition(std::string("no GPU is visible (cudaGetDeviceCount: ") +
                              (r == cudaSuccess ? "0 devices" : cudaGetErrorString(r)) + ")");
  }
  cudaDeviceProp prop;
  TFPS_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, 0), "reading the first GPU's UUID");
  static const char kHex[] = "0123456789abcdef";
  gpu->clear();
  for (int i = 0; i < 16; ++i) {
    const unsigned char b = static_cast<unsigned char>(prop.uuid.bytes[i]);
    gpu->push_back(kHex[b >> 4]);
    gpu->push_back(kHex[b & 15]);
  }
  return Status::Ok();
}

const bool registered = [] {
  DeviceReduceHooks hooks;
  hooks.probe = ProbeNccl;
  hooks.new_id = gpu::NcclLocalGroup::NewUniqueId;
  hooks.make = [](const std::string& id, std::vector<int> ranks, int local_rank,
                  double timeout_s) -> std::unique_ptr<LocalReduce> {
    return std::make_unique<NcclLocalReduce>(id, std::move(ranks), local_rank, timeout_s);
  };
  RegisterDeviceReduce(std::move(hooks));
  return true;
}();

}  // namespace
}  // namespace tfps

#endif  // TFPS_WITH_CUDA

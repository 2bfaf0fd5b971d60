// nccl_local.h: NCCL through dlopen, and bounded waits around it.
#include "tf_ps_ops/cc/gpu/nccl_local.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

#include "tf_ps_ops/cc/common/cuda_status.h"

namespace tfps {
namespace gpu {
namespace {

// NCCL's C ABI (nccl.h; stable since 2.7): results and enums are ints, a communicator is a
// pointer, the unique id a 128-byte struct passed by value.
struct UniqueId {
  char internal[kNcclUniqueIdBytes];
};
using Comm = void*;
constexpr int kNcclSuccess = 0;
constexpr int kNcclSum = 0;

struct Api {
  void* handle = nullptr;
  int (*get_version)(int*) = nullptr;
  int (*get_unique_id)(UniqueId*) = nullptr;
  int (*comm_init_rank)(Comm*, int, UniqueId, int) = nullptr;
  int (*comm_destroy)(Comm) = nullptr;
  int (*comm_abort)(Comm) = nullptr;
  int (*comm_get_async_error)(Comm, int*) = nullptr;
  int (*reduce)(const void*, void*, size_t, int, int, int, Comm, cudaStream_t) = nullptr;
  int (*broadcast)(const void*, void*, size_t, int, int, Comm, cudaStream_t) = nullptr;
  const char* (*get_error_string)(int) = nullptr;
};

std::mutex api_mu;
Api api;  // filled once by Load, under api_mu; read-only afterwards

template <typename F>
bool Resolve(void* handle, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(handle, name));
  return *fn != nullptr;
}

std::string NcclError(int result, const char* what) {
  const char* text = api.get_error_string != nullptr ? api.get_error_string(result) : "";
  return std::string(what) + ": NCCL error " + std::to_string(result) + " (" + text + ")";
}

}  // namespace

Status NcclLocalGroup::Load(const std::string& library) {
  std::lock_guard<std::mutex> lock(api_mu);
  if (api.handle != nullptr) return Status::Ok();
  const std::string name = library.empty() ? "libnccl.so.2" : library;
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return FailedPrecondition("NCCL cannot be opened (" + name + "): " + dlerror() +
                              ". Install the gpu extra (pip install tf_ps_ops[gpu], which "
                              "brings nvidia-nccl-cu12) or pass the path of libnccl.so.2");
  }
  Api a;
  a.handle = handle;
  const bool ok = Resolve(handle, "ncclGetVersion", &a.get_version) &&
                  Resolve(handle, "ncclGetUniqueId", &a.get_unique_id) &&
                  Resolve(handle, "ncclCommInitRank", &a.comm_init_rank) &&
                  Resolve(handle, "ncclCommDestroy", &a.comm_destroy) &&
                  Resolve(handle, "ncclCommAbort", &a.comm_abort) &&
                  Resolve(handle, "ncclCommGetAsyncError", &a.comm_get_async_error) &&
                  Resolve(handle, "ncclReduce", &a.reduce) &&
                  Resolve(handle, "ncclBroadcast", &a.broadcast) &&
                  Resolve(handle, "ncclGetErrorString", &a.get_error_string);
  if (!ok) {
    dlclose(handle);
    return FailedPrecondition(name + " lacks NCCL functions this build uses (NCCL 2.7 or "
                              "newer is needed)");
  }
  api = a;
  return Status::Ok();
}

int NcclLocalGroup::Version() {
  int version = 0;
  if (api.get_version != nullptr) api.get_version(&version);
  return version;
}

Status NcclLocalGroup::NewUniqueId(std::string* id) {
  if (api.handle == nullptr) return FailedPrecondition("NCCL is not loaded (NcclLocalGroup::Load)");
  UniqueId raw;
  const int r = api.get_unique_id(&raw);
  if (r != kNcclSuccess) return Internal(NcclError(r, "ncclGetUniqueId"));
  id->assign(raw.internal, kNcclUniqueIdBytes);
  return Status::Ok();
}

Status NcclLocalGroup::Create(const std::string& id, int local_rank, int local_size, int device,
                              double timeout_s, std::unique_ptr<NcclLocalGroup>* out) {
  if (api.handle == nullptr) return FailedPrecondition("NCCL is not loaded (NcclLocalGroup::Load)");
  const std::string who = "NCCL group, local rank " + std::to_string(local_rank) + " of " +
                          std::to_string(local_size) + " on GPU " + std::to_string(device);
  if (id.size() != kNcclUniqueIdBytes) {
    return InvalidArgument(who + ": the unique id has " + std::to_string(id.size()) +
                           " bytes, not " + std::to_string(kNcclUniqueIdBytes));
  }
  if (local_size < 1 || local_rank < 0 || local_rank >= local_size) {
    return InvalidArgument(who + ": the rank must be in [0, size)");
  }
  UniqueId raw;
  std::memcpy(raw.internal, id.data(), kNcclUniqueIdBytes);
  // ncclCommInitRank blocks until every rank has joined: run it on a thread of its own and
  // wait with a bound. On timeout the thread is left to finish or fail on its own (NCCL has
  // no way to cancel a blocking init); its communicator, if it ever forms, is destroyed.
  auto result = std::make_shared<std::promise<std::pair<int, Comm>>>();
  std::future<std::pair<int, Comm>> joined = result->get_future();
  std::thread([raw, local_rank, local_size, device, result]() {
    Comm comm = nullptr;
    int r = static_cast<int>(cudaSetDevice(device)) == 0
                ? api.comm_init_rank(&comm, local_size, raw, local_rank)
                : -1;
    result->set_value({r, comm});
  }).detach();
  if (joined.wait_for(std::chrono::duration<double>(timeout_s)) != std::future_status::ready) {
    std::thread([f = std::move(joined)]() mutable {
      const auto late = f.get();
      if (late.first == kNcclSuccess) api.comm_destroy(late.second);
    }).detach();
    return DeadlineExceeded(who + ": the communicator did not form within " +
                            std::to_string(timeout_s) + " s: did every local worker call it "
                            "with the leader's id?");
  }
  const auto done = joined.get();
  if (done.first == -1) {
    return Internal(who + ": cudaSetDevice failed (is there such a GPU?)");
  }
  if (done.first != kNcclSuccess) return Internal(NcclError(done.first, who.c_str()));
  out->reset(new NcclLocalGroup(done.second, local_rank, local_size, device));
  return Status::Ok();
}

NcclLocalGroup::~NcclLocalGroup() {
  if (comm_ != nullptr) api.comm_destroy(comm_);
}

Status NcclLocalGroup::Finish(int result, const char* what, void* stream, double timeout_s) {
  const std::string who = std::string(what) + " of local rank " + std::to_string(local_rank_) +
                          " of " + std::to_string(local_size_);
  if (result != kNcclSuccess) return Internal(NcclError(result, who.c_str()));
  if (timeout_s <= 0) return Status::Ok();
  // Poll the stream: NCCL's own failures surface through its async error, a missing peer
  // as a stream that never drains. Either ends in an abort, so nothing stays stuck.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  while (true) {
    const cudaError_t q = cudaStreamQuery(s);
    if (q == cudaSuccess) return Status::Ok();
    if (q != cudaErrorNotReady) return CudaStatus(q, who);
    int async = kNcclSuccess;
    api.comm_get_async_error(comm_, &async);
    if (async != kNcclSuccess) {
      api.comm_abort(comm_);
      comm_ = nullptr;
      return Internal(NcclError(async, who.c_str()));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      api.comm_abort(comm_);
      comm_ = nullptr;
      return DeadlineExceeded(who + " did not finish within " + std::to_string(timeout_s) +
                              " s (a local worker missing?); the communicator is aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

Status NcclLocalGroup::ReduceToLeader(const void* send, void* recv, uint64_t count,
                                      NcclType type, void* stream, double timeout_s) {
  if (comm_ == nullptr) return FailedPrecondition("the NCCL group was aborted");
  const int r = api.reduce(send, recv, count, static_cast<int>(type), kNcclSum, 0, comm_,
                           static_cast<cudaStream_t>(stream));
  return Finish(r, "NCCL reduce to the leader", stream, timeout_s);
}

Status NcclLocalGroup::BroadcastFromLeader(void* buf, uint64_t count, NcclType type,
                                           void* stream, double timeout_s) {
  if (comm_ == nullptr) return FailedPrecondition("the NCCL group was aborted");
  const int r = api.broadcast(buf, buf, count, static_cast<int>(type), 0, comm_,
                              static_cast<cudaStream_t>(stream));
  return Finish(r, "NCCL broadcast from the leader", stream, timeout_s);
}

}  // namespace gpu
}  // namespace tfps

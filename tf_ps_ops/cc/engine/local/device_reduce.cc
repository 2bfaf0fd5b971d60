// device_reduce.h: the NCCL-or-shared-memory choice for GPU tensors.
#include "tf_ps_ops/cc/engine/local/device_reduce.h"

#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <utility>

#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/engine/engine.h"
#include "tf_ps_ops/cc/engine/local/hierarchical.h"

namespace tfps {
namespace {

std::mutex hooks_mu;
std::unique_ptr<DeviceReduceHooks> hooks;  // guarded by hooks_mu; set once at load

// What each worker tells the others (one allgather): byte 0 is 1 when it can use NCCL,
// then the leader's NCCL id, its GPU's UUID, and why it cannot use NCCL (NUL-padded).
constexpr size_t kVoteBytes = 512;
constexpr size_t kIdOffset = 1;
constexpr size_t kGpuOffset = kIdOffset + kDeviceReduceIdBytes;
constexpr size_t kGpuBytes = 64;
constexpr size_t kReasonOffset = kGpuOffset + kGpuBytes;

std::string Who(const std::vector<int>& ranks, size_t i) {
  return "local rank " + std::to_string(i) +
         (i < ranks.size() ? " (rank " + std::to_string(ranks[i]) + ")" : "");
}

}  // namespace

void RegisterDeviceReduce(DeviceReduceHooks h) {
  std::lock_guard<std::mutex> lock(hooks_mu);
  hooks = std::make_unique<DeviceReduceHooks>(std::move(h));
}

const DeviceReduceHooks* RegisteredDeviceReduce() {
  std::lock_guard<std::mutex> lock(hooks_mu);
  return hooks.get();
}

DeviceReduceChoice ChooseDeviceReduce(bool cuda_build, bool alone, const std::vector<int>& ranks,
                                      const std::vector<std::string>& votes,
                                      const std::vector<std::string>& gpus) {
  if (!cuda_build) {
    return {false, "this op library is a CPU build (GPU tensors, if any, are staged to host "
                   "memory and summed through shared memory)"};
  }
  if (alone) return {false, "no other worker on this host to sum with"};
  const std::string shm = "GPU tensors are summed through shared memory, not NCCL: ";
  for (size_t i = 0; i < votes.size(); ++i) {
    if (!votes[i].empty()) return {false, shm + Who(ranks, i) + " cannot use NCCL: " + votes[i]};
  }
  for (size_t i = 0; i < gpus.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (gpus[i] != gpus[j]) continue;
      return {false, shm + Who(ranks, j) + " and " + Who(ranks, i) + " use the same GPU (" +
                         gpus[i] + "), and NCCL takes one GPU per worker (give each local "
                         "worker its own, e.g. CUDA_VISIBLE_DEVICES=<local rank>)"};
    }
  }
  return {true, "GPU tensors of this host's " + std::to_string(votes.size()) +
                    " workers are summed with NCCL"};
}

Status SetUpDeviceReduce(Engine* engine, const Config& config, const std::vector<int>& local,
                         int local_rank, bool alone, std::unique_ptr<LocalReduce>* out) {
  out->reset();
  const DeviceReduceHooks* h = RegisteredDeviceReduce();
  auto vote = std::make_shared<std::string>(kVoteBytes, '\0');
  std::string gpu;
  Status usable = h == nullptr ? FailedPrecondition("a CPU build of the op library")
                               : alone ? FailedPrecondition("alone on its host")
                                       : h->probe(config.nccl_library, &gpu);
  if (usable.ok() && local_rank == 0) {
    std::string id;
    usable = h->new_id(&id);
    if (usable.ok() && id.size() == kDeviceReduceIdBytes) {
      std::memcpy(&(*vote)[kIdOffset], id.data(), id.size());
    } else if (usable.ok()) {
      usable = Internal("NCCL's unique id has " + std::to_string(id.size()) + " bytes");
    }
  }
  (*vote)[0] = usable.ok() ? 1 : 0;
  gpu = gpu.substr(0, kGpuBytes - 1);
  std::memcpy(&(*vote)[kGpuOffset], gpu.data(), gpu.size());
  if (!usable.ok()) {
    const std::string why = usable.message().substr(0, kVoteBytes - kReasonOffset - 1);
    std::memcpy(&(*vote)[kReasonOffset], why.data(), why.size());
  }
  auto got = std::make_shared<std::promise<std::pair<Status, std::vector<std::string>>>>();
  GatherRequest gather;
  gather.name = "tfps.hierarchical.nccl";
  gather.dtype = DType::kUInt8;
  gather.dims = {static_cast<int64_t>(kVoteBytes)};
  gather.count = kVoteBytes;
  gather.input = vote->data();
  gather.input_holder = vote;
  gather.done = [got](const Status& s, const std::vector<PeerTensor>& parts) {
    std::vector<std::string> all;
    if (s.ok()) {
      for (const PeerTensor& p : parts) {
        all.emplace_back(static_cast<const char*>(p.data), kVoteBytes);
      }
    }
    got->set_value({s, std::move(all)});
  };
  auto future = got->get_future();
  engine->EnqueueGather(std::move(gather));
  if (future.wait_for(std::chrono::duration<double>(config.timeout_s * 1.2 + 1)) !=
      std::future_status::ready) {
    return DeadlineExceeded("the workers did not agree on NCCL for GPU tensors in time");
  }
  auto [status, all] = future.get();
  if (!status.ok()) return status.WithPrefix("agreeing on NCCL for GPU tensors: ");
  std::vector<std::string> votes, gpus;
  for (int r : local) {
    if (r < 0 || static_cast<size_t>(r) >= all.size()) {
      return Internal("agreeing on NCCL: no answer of rank " + std::to_string(r));
    }
    const std::string& v = all[r];
    votes.push_back(v[0] == 1 ? "" : std::string(v.c_str() + kReasonOffset));
    if (votes.back().empty() && v[0] != 1) votes.back() = "no reason given";
    gpus.push_back(std::string(v.c_str() + kGpuOffset));
  }
  const DeviceReduceChoice choice = ChooseDeviceReduce(h != nullptr, alone, local, votes, gpus);
  if (local_rank == 0 && h != nullptr && !alone) {  // once per host, where it can matter
    TFPS_LOG(Info) << choice.reason;
  }
  if (!choice.nccl) return Status::Ok();
  const std::string id = all[local[0]].substr(kIdOffset, kDeviceReduceIdBytes);
  *out = h->make(id, local, local_rank, config.timeout_s);
  return Status::Ok();
}

bool Engine::TakesDeviceTensor(const PushPullRequest& request) {
  std::lock_guard<std::mutex> lock(loop_mu_);
  return hierarchical_ && hierarchical_->takes_device_tensors() &&
         Hierarchical::Eligible(request, job_compresses_);
}

}  // namespace tfps

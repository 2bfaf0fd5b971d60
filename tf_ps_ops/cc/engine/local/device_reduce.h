// Which LocalReduce sums the GPU tensors of one host (docs/gpu.md, "Intra-host reduction
// with NCCL"). The engine has no CUDA in it (ps_server and _core link it too): the op
// library of a CUDA build registers DeviceReduceHooks when it is loaded
// (kernels/nccl_local_reduce.cc), and the engine asks them at init.
//
// The choice, made once per job at init and the same on every worker of a host:
//   - GPU tensors reduce with NCCL when this is a CUDA build, the host has more than one
//     local worker, and every local worker opened NCCL and sees a GPU;
//   - otherwise they are staged to host memory and summed through shared memory like CPU
//     tensors (ShmLocalReduce), and one line says why (logged once, by the local leader).
// CPU tensors always go through shared memory.
#ifndef TFPS_CC_ENGINE_LOCAL_DEVICE_REDUCE_H_
#define TFPS_CC_ENGINE_LOCAL_DEVICE_REDUCE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tf_ps_ops/cc/common/config.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/engine/local/local_reduce.h"

namespace tfps {

class Engine;

struct DeviceReduceHooks {
  // Opens NCCL (`library`: TFPS_NCCL_LIBRARY, empty: the usual places) and checks that a
  // GPU is visible: Ok, or why not (what to install). `gpu`: the UUID of the GPU this
  // worker's TensorFlow will use first (its first visible one).
  std::function<Status(const std::string& library, std::string* gpu)> probe;
  // The leader's NCCL unique id (kDeviceReduceIdBytes bytes), after a successful probe.
  std::function<Status(std::string* id)> new_id;
  // The NCCL LocalReduce of this local worker: `ranks` the global rank of each local rank.
  std::function<std::unique_ptr<LocalReduce>(const std::string& id, std::vector<int> ranks,
                                             int local_rank, double timeout_s)>
      make;
};

constexpr size_t kDeviceReduceIdBytes = 128;  // ncclUniqueId

// Called once by a CUDA build's op library at load; a second call replaces the first.
void RegisterDeviceReduce(DeviceReduceHooks hooks);
// The registered hooks, or nullptr (a CPU build, or the core module alone).
const DeviceReduceHooks* RegisteredDeviceReduce();

struct DeviceReduceChoice {
  bool nccl = false;
  std::string reason;  // one line: why NCCL, or why shared memory
};

// The choice itself, without side effects (tests/unit/test_device_reduce_choice.py):
// `votes[i]` is empty when local rank i can use NCCL, else why it cannot; `ranks[i]` its
// global rank; `gpus[i]` its GPU's UUID. NCCL takes one GPU per worker: local workers that
// share a GPU (several workers on one device) sum through shared memory.
DeviceReduceChoice ChooseDeviceReduce(bool cuda_build, bool alone, const std::vector<int>& ranks,
                                      const std::vector<std::string>& votes,
                                      const std::vector<std::string>& gpus);

// Every worker of the job calls it once at init when hierarchical aggregation is on (one
// allgather: every worker takes part, CPU builds too, so the job agrees). `*out` is the
// NCCL LocalReduce for GPU tensors, or null.
Status SetUpDeviceReduce(Engine* engine, const Config& config, const std::vector<int>& local,
                         int local_rank, bool alone, std::unique_ptr<LocalReduce>* out);

}  // namespace tfps

#endif  // TFPS_CC_ENGINE_LOCAL_DEVICE_REDUCE_H_

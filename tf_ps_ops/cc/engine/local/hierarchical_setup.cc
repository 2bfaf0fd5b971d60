#include "tf_ps_ops/cc/engine/local/hierarchical_setup.h"

#include <chrono>
#include <future>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/engine/local/device_reduce.h"
#include "tf_ps_ops/cc/engine/local/hierarchical.h"
#include "tf_ps_ops/cc/engine/local/shm_local_reduce.h"

namespace tfps {

namespace {

constexpr size_t kTokenChars = 32;

// The ranks of the workers on this worker's host (every worker sees the same), or none
// when no host has more than one.
std::vector<int> LocalRanks(const ClusterView& view, int rank) {
  std::map<std::string, std::vector<int>> hosts;
  for (size_t r = 0; r < view.worker_hosts.size(); ++r) {
    hosts[view.worker_hosts[r]].push_back(static_cast<int>(r));
  }
  bool shared = false;
  for (const auto& kv : hosts) shared = shared || kv.second.size() > 1;
  if (!shared) return {};
  return hosts[view.worker_hosts[rank]];
}

// The leader's random token names the host's segments; one allgather (every worker takes
// part, so all agree) carries it to its local workers.
Status ShareLeaderToken(const Config& config, const std::vector<int>& local, int local_rank,
                        const HierarchicalHooks& hooks, std::string* leader_token) {
  auto token = std::make_shared<std::string>(kTokenChars, '0');
  if (local_rank == 0) TFPS_RETURN_IF_ERROR(ShmLocalReduce::NewToken(token.get()));
  auto got = std::make_shared<std::promise<std::pair<Status, std::string>>>();
  GatherRequest gather;
  gather.name = "tfps.hierarchical.token";
  gather.dtype = DType::kUInt8;
  gather.dims = {static_cast<int64_t>(kTokenChars)};
  gather.count = kTokenChars;
  gather.input = token->data();
  gather.input_holder = token;
  gather.done = [got, leader = local[0]](const Status& s, const std::vector<PeerTensor>& parts) {
    got->set_value({s, s.ok() ? std::string(static_cast<const char*>(parts[leader].data),
                                             kTokenChars)
                              : ""});
  };
  auto future = got->get_future();
  hooks.gather(std::move(gather));
  if (future.wait_for(std::chrono::duration<double>(config.timeout_s * 1.2 + 1)) !=
      std::future_status::ready) {
    return DeadlineExceeded("the workers did not exchange the hierarchical aggregation's "
                            "token in time: does every worker set TFPS_HIERARCHICAL=1?");
  }
  Status status;
  std::tie(status, *leader_token) = future.get();
  return status.WithPrefix("sharing the hierarchical aggregation's token (every worker "
                           "must set the same TFPS_HIERARCHICAL): ");
}

}  // namespace

Status SetUpHierarchical(Engine* engine, const Config& config, const ClusterView& view,
                         int rank, int local_rank, const HierarchicalHooks& hooks,
                         std::shared_ptr<Hierarchical>* out) {
  if (!config.hierarchical) return Status::Ok();
  if (!config.consistency.bsp()) {
    // A local sum waits for every local worker: a bsp step inside an ssp/asp job. The
    // stale rounds of the servers count each worker's own pushes, so every worker pushes.
    TFPS_LOG(Info) << "hierarchical aggregation is off under TFPS_CONSISTENCY="
                   << ConsistencyName(config.consistency) << " (it is a bsp step)";
    return Status::Ok();
  }
  const std::vector<int> local = LocalRanks(view, rank);
  if (local.empty()) return Status::Ok();  // one worker per host: nothing to sum locally
  std::string leader_token;
  TFPS_RETURN_IF_ERROR(ShareLeaderToken(config, local, local_rank, hooks, &leader_token));
  // Alone on its host (or on one with more workers than a push can list), a worker still
  // goes through Hierarchical, which cuts tensors into the same chunks everywhere.
  const bool alone = local.size() < 2 || local.size() > static_cast<size_t>(kMaxParams);
  if (local.size() > static_cast<size_t>(kMaxParams)) {
    TFPS_LOG(Warning) << local.size() << " workers on this host: hierarchical aggregation "
                      << "takes at most " << kMaxParams << "; this host's workers push alone";
  }
  if (!alone && leader_token.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return Internal("the local leader sent a malformed shared-memory token");
  }
  std::unique_ptr<LocalReduce> reduce;
  if (!alone) {
    reduce = std::make_unique<ShmLocalReduce>(leader_token, local, local_rank, config.stall);
  }
  auto hierarchical = std::make_shared<Hierarchical>(
      std::move(reduce), alone ? std::vector<int>{rank} : local, hooks.submit);
  std::unique_ptr<LocalReduce> device_reduce;  // NCCL for GPU tensors (device_reduce.h)
  TFPS_RETURN_IF_ERROR(
      SetUpDeviceReduce(engine, config, local, local_rank, alone, &device_reduce));
  hierarchical->SetDeviceReduce(std::move(device_reduce));
  // A stopped local worker is alive to the shared memory's liveness check: the scheduler's
  // word that the job cannot go on must end the local waits too.
  std::weak_ptr<Hierarchical> weak_hierarchical = hierarchical;
  hooks.on_job_failed([weak_hierarchical](const Status& why) {
    if (auto h = weak_hierarchical.lock()) h->Fail(why);
  });
  TFPS_LOG(Debug) << "hierarchical aggregation: local rank " << local_rank << " of "
                  << local.size();
  *out = std::move(hierarchical);
  return Status::Ok();
}

}  // namespace tfps

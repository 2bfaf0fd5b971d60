// Setting up hierarchical aggregation at init (TFPS_HIERARCHICAL, docs/hierarchical.md):
// which workers share this host, the local leader's shared-memory token (one allgather that
// every worker takes part in, so all agree), and the Hierarchical that then takes the
// eligible requests (Engine::EnqueueAll).
#ifndef TFPS_CC_ENGINE_LOCAL_HIERARCHICAL_SETUP_H_
#define TFPS_CC_ENGINE_LOCAL_HIERARCHICAL_SETUP_H_

#include <functional>
#include <memory>

#include "tf_ps_ops/cc/cluster/messages.h"
#include "tf_ps_ops/cc/common/config.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/engine/engine.h"

namespace tfps {

class Hierarchical;  // hierarchical.h

// What the setup needs of the running engine (Engine::StartHierarchical makes them).
struct HierarchicalHooks {
  std::function<void(GatherRequest)> gather;  // Engine::EnqueueGather
  // Queues a local leader's push for the engine thread; fails it once the engine stopped.
  std::function<void(PushPullRequest)> submit;
  // Adds a listener for the job's end by another member's failure (nothing once stopped).
  std::function<void(std::function<void(const Status&)>)> on_job_failed;
};

// Every worker calls it once at init, with the engine thread running. *out stays null when
// the job runs flat: TFPS_HIERARCHICAL off, a consistency other than bsp, or one worker per
// host.
Status SetUpHierarchical(Engine* engine, const Config& config, const ClusterView& view,
                         int rank, int local_rank, const HierarchicalHooks& hooks,
                         std::shared_ptr<Hierarchical>* out);

}  // namespace tfps

#endif  // TFPS_CC_ENGINE_LOCAL_HIERARCHICAL_SETUP_H_

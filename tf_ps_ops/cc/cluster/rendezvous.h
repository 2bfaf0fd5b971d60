// The registrant's side of the rendezvous: servers and workers register with the scheduler
// (ps_server/scheduler.h) and wait until every role has, then learn the cluster.
#ifndef TFPS_CC_CLUSTER_RENDEZVOUS_H_
#define TFPS_CC_CLUSTER_RENDEZVOUS_H_

#include <string>
#include <vector>

#include <zmq.hpp>

#include "tf_ps_ops/cc/cluster/messages.h"
#include "tf_ps_ops/cc/common/status.h"

namespace tfps {

// Registers `request` on `socket` (a DEALER connected to the scheduler, kept open
// afterwards: the scheduler notices a registrant that dies) and waits up to `timeout_s` for
// the cluster to be complete.
Status RegisterWithScheduler(zmq::socket_t& socket, const std::string& scheduler,
                             const RegisterRequest& request, double timeout_s,
                             ClusterView* view);

// Computes local_rank/local_size of `rank` from the hosts of all workers.
void LocalRankOf(const std::vector<std::string>& worker_hosts, int rank, int* local_rank,
                 int* local_size);

}  // namespace tfps

#endif  // TFPS_CC_CLUSTER_RENDEZVOUS_H_

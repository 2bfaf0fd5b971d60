// The registrant's side of the rendezvous: servers and workers register with the scheduler
// and wait until every role has, then learn the cluster.
#ifndef TFPS_CC_ENGINE_RENDEZVOUS_H_
#define TFPS_CC_ENGINE_RENDEZVOUS_H_

#include <map>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "tf_ps_ops/cc/common/status.h"

namespace tfps {

struct ClusterView {
  std::vector<std::string> servers;       // "host:port", indexed by server id
  std::vector<std::string> worker_hosts;  // indexed by rank
  std::vector<std::string> worker_peers;  // "host:peer_port" by rank (workers only; port 0: none)
  int server_id = -1;                     // this process's id when it is a server
};

// Registers `info` ("role", "rank"/"size"/"peer_port" or "port"/"host") on `socket` (a DEALER connected to the
// scheduler, kept open afterwards: the scheduler notices a registrant that dies) and waits
// up to `timeout_s` for the cluster to be complete.
Status RegisterWithScheduler(zmq::socket_t& socket, const std::string& scheduler,
                             const std::map<std::string, std::string>& info, double timeout_s,
                             ClusterView* view);

// Computes local_rank/local_size of `rank` from the hosts of all workers.
void LocalRankOf(const std::vector<std::string>& worker_hosts, int rank, int* local_rank,
                 int* local_size);

}  // namespace tfps

#endif  // TFPS_CC_ENGINE_RENDEZVOUS_H_

// The rendezvous messages, as text: what a registrant tells the scheduler (kRegister) and
// what the scheduler answers (kRegisterReply). Both sides format and parse them here and
// nowhere else. Parsing is strict: every number must be all digits and in range, and a
// bad message is an InvalidArgument status that names the field, never a silent 0.
//
// On the wire each is "name=value" lines (wire/message.h carries them as the payload).
#ifndef TFPS_CC_CLUSTER_MESSAGES_H_
#define TFPS_CC_CLUSTER_MESSAGES_H_

#include <string>
#include <vector>

#include "tf_ps_ops/cc/common/consistency.h"
#include "tf_ps_ops/cc/common/status.h"

namespace tfps {

enum class Role { kServer, kWorker };

// kRegister: a server announces the ports it serves on (one per ZeroMQ I/O thread,
// TFPS_IO_THREADS); a worker its rank, the job size it was started with, and the port it
// takes peer (SFB) traffic on.
struct RegisterRequest {
  Role role = Role::kWorker;
  std::string host;   // empty: the scheduler uses the connection's peer address
  int port = 0;       // server: 1..65535; worker: its peer port, 0 for none
  // Servers only: the ports of its other I/O threads (at most kMaxIoThreads - 1), after
  // `port`; absent on the wire when there are none.
  std::vector<int> more_ports;
  int rank = -1;      // workers only
  int size = 0;       // workers only
  Consistency consistency;  // workers only (TFPS_CONSISTENCY); absent on the wire: bsp
};

std::string FormatRegister(const RegisterRequest& request);
Status ParseRegister(const std::string& text, RegisterRequest* request);

// kRegisterReply once every role has registered: the cluster as the registrant sees it.
struct ClusterView {
  std::vector<std::string> servers;       // "host:port", indexed by server id
  // Every port each server listens on, by server id, the first that of `servers`; empty
  // (and absent on the wire) when every server has one.
  std::vector<std::vector<int>> server_ports;
  std::vector<std::string> worker_hosts;  // indexed by rank
  std::vector<std::string> worker_peers;  // "host:peer_port" by rank (workers only; port 0: none)
  int server_id = -1;                     // this process's id when it is a server
  Consistency consistency;                // the job's, as the workers agreed (absent: bsp)
};

// The reply to a registrant while the cluster is incomplete ("waiting for ...").
std::string FormatWaiting(const std::string& waiting);
std::string FormatClusterView(const ClusterView& view);

// A kRegisterReply: either *ready with *view filled, or not ready with *waiting saying
// for whom the scheduler still waits.
Status ParseRegisterReply(const std::string& text, bool* ready, std::string* waiting,
                          ClusterView* view);

// The "host:port" worker `rank` connects to on `server`: port (rank mod its ports) of
// view.server_ports, so that the server's connections spread over its I/O threads.
std::string ServerAddressFor(const ClusterView& view, int server, int rank);

}  // namespace tfps

#endif  // TFPS_CC_CLUSTER_MESSAGES_H_

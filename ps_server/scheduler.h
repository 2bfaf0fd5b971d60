// The rendezvous ("scheduler" in BytePS/ps-lite terms): one well-known address where
// servers and workers register. Once every role has, it tells each the cluster: the server
// list (ids in registration order) and every worker's host. It then stays up until every
// worker has said goodbye, so it notices members that die, and tells every member at once
// when one dies or reports a failure (cluster/notice.h). Before the cluster is complete a
// member whose connection dies is removed, so that its restart can take the place.
#ifndef TFPS_PS_SERVER_SCHEDULER_H_
#define TFPS_PS_SERVER_SCHEDULER_H_

#include <atomic>
#include <map>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "ps_server/liveness.h"
#include "tf_ps_ops/cc/cluster/messages.h"
#include "tf_ps_ops/cc/common/config.h"
#include "tf_ps_ops/cc/common/rate_limit.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/transport/auth.h"

namespace tfps {

class SilentConnections;  // tf_ps_ops/cc/transport/connection_limits.h

class Scheduler {
 public:
  Scheduler(int num_workers, int num_servers, const Config& config);

  // Binds tcp://*:port (0: any free port) and reports the port bound.
  Status Bind(int port, int* bound_port);
  // Serves until every worker has said goodbye or died, or `stop` is set. An exit
  // code, or kStoppedMidJob (exit_codes.h) when `stop` ended it before the workers finished.
  int Run(const std::atomic<bool>& stop);

 private:
  struct Member {
    std::string identity;  // ZeroMQ routing id
    std::string host;
    int port = 0;          // servers: their port; workers: their peer port (SFB), or 0
    std::vector<int> more_ports;  // servers: the ports of their other I/O threads
    int fd = -1;           // the connection's file descriptor, to match disconnects
    bool done = false;     // said goodbye, or is gone
  };

  // Reads and handles every message waiting on the router; `closed`: connections whose
  // close the monitor has reported, never marked a member's again.
  void TakeMessages(SilentConnections& silent, std::vector<zmq::message_t>* frames,
                    const std::vector<int>& closed = {});
  void OnMessage(std::vector<zmq::message_t>& frames);
  void OnRegister(const std::string& identity, zmq::message_t& payload, int fd);
  // A member lost (scheduler_members.cc): its connection closed without a goodbye.
  void OnDisconnect(int fd);
  // A member's kMemberNotice: logged and told to every other member, naming the sender.
  void OnNotice(const std::string& identity, Code code, const std::string& text);
  // Sends a notice about member `about` (a routing id) to every other member still in the job.
  void TellMembers(Code code, const std::string& text, const std::string& about);
  // "server 1 (host:port)" or "worker 2 (host)" for a registered routing id; empty if none.
  std::string NameOf(const std::string& identity) const;
  // Whether descriptor `fd` is a registered member's connection.
  bool IsMemberConnection(int fd) const;
  // Tells every registrant the cluster, once it is complete.
  void AbandonRendezvous();
  void AnnounceCluster();
  void Reply(const std::string& identity, const std::string& text);  // a kRegisterReply
  // Logs and answers a refusal, both rate-limited per peer (limiter_).
  void Refuse(const std::string& identity, Code code, const std::string& why,
              const char* what = "a registration");
  // Whether `request` (a worker's) agrees with the workers registered before it on the
  // consistency model; if not, refuses every registrant so far and the newcomer.
  bool ConsistencyAgrees(const std::string& identity, const RegisterRequest& request);
  // Pings the members and reports those whose serving thread stopped answering
  // (liveness.h) as it reports a dead one.
  void CheckLiveness();
  void OnSilent(const std::string& identity, double seconds);
  std::string Waiting() const;
  bool complete() const;
  // A member registered (+1) or left (-1): the scheduler's membership metrics.
  static void CountMembership(int change);

  const int num_workers_;
  const int num_servers_;
  const Config config_;
  zmq::context_t context_;
  zmq::socket_t router_;
  std::unique_ptr<ZapHandler> zap_;  // with a job key: admits only its holders
  std::vector<Member> servers_;
  std::map<int, Member> workers_;  // by rank
  bool ready_ = false;
  // Set when workers disagreed on TFPS_CONSISTENCY: every registrant is refused with it and
  // the scheduler exits (1) shortly after, once the refusals have left.
  std::string conflict_;
  Consistency consistency_;  // the first registered worker's; every other must match it
  int lost_workers_ = 0;
  std::string failure_;  // the first fatal notice or death after the cluster was complete
  PeerRateLimiter limiter_;  // what misbehaving peers make us log and answer
  Liveness liveness_;        // application heartbeats, once the cluster is complete
};

}  // namespace tfps

#endif  // TFPS_PS_SERVER_SCHEDULER_H_

// The metrics port (TFPS_METRICS_PORT): a ZeroMQ ZMQ_STREAM socket on a thread of its own
// that answers HTTP GET /metrics with RenderMetrics() (common/metrics.h).
//
// Why ZMQ_STREAM: every role has libzmq already, and only the workers have Python, so one C++
// endpoint serves the scheduler, the servers and the workers alike, and binds the way every
// other socket does (TFPS_BIND, IPv6, CheckBindAllowed). The thread never blocks on a
// client: a request is read into at most kMaxRequestBytes, a connection that has not sent a
// whole request within kRequestTimeoutMs is closed, at most kMaxConnections are open at
// once (a new one closes the oldest), and answers are sent without waiting (a client that
// does not read loses its answer).
#ifndef TFPS_CC_TRANSPORT_METRICS_HTTP_H_
#define TFPS_CC_TRANSPORT_METRICS_HTTP_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include <zmq.hpp>

#include "tf_ps_ops/cc/common/config.h"
#include "tf_ps_ops/cc/common/status.h"

namespace tfps {

class MetricsEndpoint {
 public:
  static constexpr size_t kMaxRequestBytes = 8192;
  static constexpr int kRequestTimeoutMs = 5000;
  static constexpr size_t kMaxConnections = 64;

  // Null with OK when config.metrics_port is unset. Refuses (FailedPrecondition) to listen
  // beyond loopback without the job's key or TFPS_INSECURE=1, like every other socket;
  // `what` names the role in messages ("the scheduler").
  static Status StartIfAsked(const Config& config, const std::string& what,
                             std::unique_ptr<MetricsEndpoint>* out);
  ~MetricsEndpoint();  // stops and joins the thread

  int port() const { return port_; }

 private:
  MetricsEndpoint() = default;
  void Loop();

  zmq::context_t context_{1};
  std::unique_ptr<zmq::socket_t> socket_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The port the process's endpoint listens on, -1 when none (for tf_ps_ops.metrics_port()).
int MetricsPort();

}  // namespace tfps

#endif  // TFPS_CC_TRANSPORT_METRICS_HTTP_H_

// Authentication and encryption of every connection with the job key (TFPS_AUTH_KEY_FILE):
// ZeroMQ's CURVE, with a ZAP handler that admits only clients holding the same key.
//
// Every role of a job has the same key pair (derived from the one secret in the file). A
// socket that binds (every ROUTER: scheduler, server, a worker's peer port) is a CURVE
// server with that secret; a socket that connects (every DEALER) is a CURVE client that
// expects the job's public key from the server and presents the same key pair. The ZAP
// handler of each process checks that the client's public key is the job's: a peer without
// the secret cannot complete the handshake, so it can neither send nor read a message.
// docs/security.md says what this protects and what not.
#ifndef TFPS_CC_TRANSPORT_AUTH_H_
#define TFPS_CC_TRANSPORT_AUTH_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include <zmq.hpp>

#include "tf_ps_ops/cc/common/config.h"
#include "tf_ps_ops/cc/common/rate_limit.h"

namespace tfps {

// Sets the CURVE options of `socket` from config.auth_secret_key (no-op without a key):
// server side for a ROUTER, client side for a DEALER. Called by SetCommonOptions.
void ApplyCurveOptions(zmq::socket_t& socket, const Config& config);

// Answers ZeroMQ's authentication requests (inproc://zeromq.zap.01) in `context` on a
// thread of its own: CURVE clients with the job's public key are admitted, everyone else
// refused (logged, rate-limited per address). Create it before any socket of the context
// binds, destroy it before the context.
class ZapHandler {
 public:
  // nullptr when the config has no key (nothing to check).
  static std::unique_ptr<ZapHandler> StartIfKeyed(zmq::context_t& context, const Config& config);
  ZapHandler(zmq::context_t& context, const std::string& public_key);
  ~ZapHandler();

 private:
  void Loop();
  void Answer(std::vector<zmq::message_t>& request);

  zmq::socket_t socket_;
  std::string public_key_;  // 32 bytes, binary
  std::atomic<bool> stop_{false};
  PeerRateLimiter limiter_;
  std::thread thread_;
};

// "tcp://<TFPS_BIND>:<port>"; logs a warning when that reaches beyond loopback and no key
// protects it (`what`: "the scheduler", ...).
std::string BindEndpoint(const Config& config, int port, const char* what);
// A role about to bind beyond loopback without a job key may not, unless TFPS_INSECURE=1
// (`ps_server --insecure`, `tfps-run --insecure`): anyone who reaches the port could join
// the job or read its tensors. FailedPrecondition naming `what` and the ways out.
Status CheckBindAllowed(const Config& config, const char* what);

// Writes a fresh CURVE secret key (Z85) to `path`, readable by its owner only.
Status WriteNewKeyFile(const std::string& path);

}  // namespace tfps

#endif  // TFPS_CC_TRANSPORT_AUTH_H_

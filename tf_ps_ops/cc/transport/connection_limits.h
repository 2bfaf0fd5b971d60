// What a flood of connections may take from a listening role: descriptors.
//
// Every role raises its soft RLIMIT_NOFILE to the hard limit at start (a 1,024 soft limit
// is common while the hard one is far higher), so that a job's own sockets, files and
// peers do not run out first.
//
// A connection that never completes ZeroMQ's handshake (a port scan, a client that
// connects and sends nothing, one that sends garbage slowly) holds a descriptor until
// ZMQ_HANDSHAKE_IVL (kHandshakeIvlMs) ends it. HandshakeLimit counts such connections on
// one listening socket from its monitor's events; when `cap` are pending it closes the
// listener (new connections are refused; ZeroMQ clients retry by themselves) and opens it
// again on the same endpoint once half have ended, or after one handshake interval (when
// every one pending at the close has ended for sure). Each close, and every failed
// accept (EMFILE: the descriptor limit), is logged, rate-limited.
#ifndef TFPS_CC_TRANSPORT_CONNECTION_LIMITS_H_
#define TFPS_CC_TRANSPORT_CONNECTION_LIMITS_H_

#include <chrono>
#include <cstdint>
#include <string>

#include <zmq.hpp>

#include "tf_ps_ops/cc/common/rate_limit.h"

namespace tfps {

// ZeroMQ's default is 30 s; a handshake on a working link takes milliseconds, CURVE's too.
constexpr int kHandshakeIvlMs = 10000;

// Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now in force
// (0 if it cannot be read). Idempotent.
uint64_t RaiseDescriptorLimit();

class HandshakeLimit {
 public:
  using Clock = std::chrono::steady_clock;
  // The monitor events OnEvent needs (add them to the socket's Monitor).
  static constexpr int kEvents = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_ACCEPT_FAILED |
                                 ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
  // The default cap: a quarter of the descriptor limit, at most 1,024.
  static int DefaultCap();

  // `socket` is bound already; `who` names the role in the log ("the scheduler").
  HandshakeLimit(zmq::socket_t& socket, const std::string& who, int cap = DefaultCap());

  // Counts a monitor event; returns false for events that are not this class's (the
  // caller handles those). May close the listener.
  bool OnEvent(int event, int value, Clock::time_point now = Clock::now());
  // Reopens a closed listener when its time has come; call it every loop turn.
  void Tick(Clock::time_point now = Clock::now());

  int pending() const { return pending_; }
  bool closed() const { return closed_; }

 private:
  void Close(Clock::time_point now);
  void Reopen(const char* why);

  zmq::socket_t& socket_;
  const std::string who_;
  const std::string endpoint_;  // the bound one, port resolved
  const int cap_;
  int pending_ = 0;  // accepted, handshake neither done nor failed
  bool closed_ = false;
  Clock::time_point closed_at_;
  uint64_t refused_closes_ = 0;
  PeerRateLimiter limiter_{10.0, 1, 4};
};

}  // namespace tfps

#endif  // TFPS_CC_TRANSPORT_CONNECTION_LIMITS_H_

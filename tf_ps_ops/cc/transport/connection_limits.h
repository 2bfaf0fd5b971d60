// What a flood of connections may take from a listening role: descriptors.
//
// Every role raises its soft RLIMIT_NOFILE to the hard limit at start (a 1,024 soft limit
// is common while the hard one is far higher), so that a job's own sockets, files and
// peers do not run out first.
//
// A connection that never gets as far as a message (a port scan, a client that connects
// and sends nothing or garbage slowly) holds a descriptor: until ZMQ_HANDSHAKE_IVL
// (kHandshakeIvlMs) ends it when it never completes ZeroMQ's handshake, and for ever when
// it completes it and stays silent. SilentConnections tracks the accepted connections of
// one listening socket (its monitor's events, and the descriptor each message arrives on)
// that have sent no message yet. Once `cap` of them are open, it shuts down those silent
// for longer than kSilentGraceMs (a member's first message comes at once: a registration,
// a hello), logging it, rate-limited, as it logs every failed accept (EMFILE: out of
// descriptors). ZeroMQ owns the descriptors: shutdown(2) makes it close the connection
// itself, and the listener stays open, so the members connected through it are untouched.
#ifndef TFPS_CC_TRANSPORT_CONNECTION_LIMITS_H_
#define TFPS_CC_TRANSPORT_CONNECTION_LIMITS_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include <zmq.hpp>

#include "tf_ps_ops/cc/common/rate_limit.h"

namespace tfps {

// ZeroMQ's default is 30 s; a handshake on a working link takes milliseconds, CURVE's too.
constexpr int kHandshakeIvlMs = 10000;
// How long a connection may stay silent before it counts against the cap.
constexpr int kSilentGraceMs = 2000;

// Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now in force
// (0 if it cannot be read). Idempotent.
uint64_t RaiseDescriptorLimit();

class SilentConnections {
 public:
  using Clock = std::chrono::steady_clock;
  // The monitor events OnEvent needs (add them to the socket's Monitor).
  static constexpr int kEvents =
      ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_ACCEPT_FAILED | ZMQ_EVENT_DISCONNECTED;
  // The default cap: a quarter of the descriptor limit, at most 1,024.
  static int DefaultCap();

  // `socket` is bound already; `who` names the role in the log ("the scheduler").
  SilentConnections(zmq::socket_t& socket, const std::string& who, int cap = DefaultCap());

  // Counts a monitor event. Returns true when the event is this class's alone (accepted,
  // accept failed); a disconnect is the caller's too (false).
  bool OnEvent(int event, int value, Clock::time_point now = Clock::now());
  // A message arrived on descriptor `fd` (its ZMQ_SRCFD): that connection speaks. Its
  // ACCEPTED event may be read after the message (the monitor is another queue): the
  // descriptors that spoke are kept until their disconnect, and ACCEPTED skips them.
  // A message without the descriptor (a ZMTP 1.0 peer's: no metadata) is ignored.
  void OnMessage(zmq::message_t& message) {
    const int fd = zmq_msg_get(message.handle(), ZMQ_SRCFD);  // no throw: -1 if unknown
    if (fd < 0) return;
    spoken_.insert(fd);
    if (!silent_.empty()) silent_.erase(fd);
  }
  // Shuts down long-silent connections when `cap` are open; call it every loop turn.
  void Tick(Clock::time_point now = Clock::now());

  size_t silent() const { return silent_.size(); }

 private:
  zmq::socket_t& socket_;
  const std::string who_;
  const std::string endpoint_;  // the bound one, for the log
  const size_t cap_;
  std::unordered_map<int, Clock::time_point> silent_;  // descriptor -> accepted at
  std::unordered_set<int> spoken_;  // descriptors that sent a message, until disconnected
  uint64_t shut_ = 0;  // shut down since the last log line
  PeerRateLimiter limiter_{10.0, 1, 4};
};

}  // namespace tfps

#endif  // TFPS_CC_TRANSPORT_CONNECTION_LIMITS_H_

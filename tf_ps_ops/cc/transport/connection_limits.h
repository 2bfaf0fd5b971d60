// What a flood of connections may take from a listening role: descriptors.
//
// Every role raises its soft RLIMIT_NOFILE to the hard limit at start (a 1,024 soft limit
// is common while the hard one is far higher), so that a job's own sockets, files and
// peers do not run out first.
//
// A connection that never gets as far as a member's message (a port scan, a client that
// connects and sends nothing or garbage slowly) holds a descriptor: until ZMQ_HANDSHAKE_IVL
// (kHandshakeIvlMs) ends it when it never completes ZeroMQ's handshake, and for ever when
// it completes it and stays silent. SilentConnections tracks the accepted connections of
// one listening socket (its monitor's events, and the descriptor each message arrives on)
// that are not a member's yet: the role names a connection a member's (OnMember) once it
// accepted a message on it (a registration, a hello). Once `cap` of them are open, it
// shuts down those open for longer than kSilentGraceMs (a member's first message comes at
// once), logging it, rate-limited, as it logs every failed accept (EMFILE: out of
// descriptors). ZeroMQ owns the descriptors: shutdown(2) makes it close the connection
// itself, and the listener stays open, so the members connected through it are untouched.
//
// Such a connection may also hold memory: ZeroMQ buffers a frame whole, up to
// ZMQ_MAXMSGSIZE (TFPS_MAX_MESSAGE_BYTES), before the role sees any of it, so a client
// that sends most of a 250 MiB frame and stops pins 250 MiB. ZeroMQ cannot lower that
// limit per connection, so SilentConnections measures it: what the kernel says the
// connection received (TCP_INFO) less what is still queued in the kernel and what reached
// the role as messages is what ZeroMQ holds for it. Every kByteCheckMs while any is open
// (the role polls that often then, PollTimeoutMs), a connection holding more than
// kUnregisteredConnectionBytes is shut down, and so are the largest while all of them
// together hold more than kUnregisteredBytes; one log line says so (rate-limited). A
// member's connection holds at most one frame, up to ZMQ_MAXMSGSIZE.
#ifndef TFPS_CC_TRANSPORT_CONNECTION_LIMITS_H_
#define TFPS_CC_TRANSPORT_CONNECTION_LIMITS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <zmq.hpp>

#include "tf_ps_ops/cc/common/rate_limit.h"

namespace tfps {

// ZeroMQ's default is 30 s; a handshake on a working link takes milliseconds, CURVE's too.
constexpr int kHandshakeIvlMs = 10000;
// How long a connection may stay silent before it counts against the cap.
constexpr int kSilentGraceMs = 2000;
// What connections that are not a member's yet may hold: each (a registration or hello is
// a few hundred bytes), and all together; and how often that is checked.
constexpr uint64_t kUnregisteredConnectionBytes = uint64_t{1} << 20;
constexpr uint64_t kUnregisteredBytes = uint64_t{32} << 20;
constexpr int kByteCheckMs = 10;

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

  // `socket` is bound already; `who` names the role in the log ("the scheduler"), `where`
  // its endpoints (empty: the socket's last one; a server binds one per I/O thread).
  SilentConnections(zmq::socket_t& socket, const std::string& who, int cap = DefaultCap(),
                    const std::string& where = "");

  // Counts a monitor event. Returns true when the event is this class's alone (accepted,
  // accept failed); a disconnect is the caller's too (false).
  bool OnEvent(int event, int value, Clock::time_point now = Clock::now());
  // A message of `frames` ([routing id][...], the routing id added by ZeroMQ) arrived:
  // counts what it brought from a connection that is not a member's yet. A message without
  // its descriptor (a ZMTP 1.0 peer's: no metadata) is ignored, here and in OnMember.
  void OnMessage(const std::vector<zmq::message_t>& frames);
  // The descriptor a message came from (its ZMQ_SRCFD), or -1.
  static int SourceFd(const zmq::message_t& message);
  // The role accepted a message from descriptor `fd` (SourceFd) as a member's: its
  // connection is no longer watched. Its ACCEPTED event may be read after the message (the monitor is
  // another queue): members' descriptors are kept until their disconnect, and ACCEPTED
  // skips them.
  void OnMember(int fd);
  // Shuts down connections as the header says; call it every loop turn. `is_member(fd)`
  // says whether a descriptor is a member's connection now: it is checked before any is
  // shut down, since a disconnect read late (the monitor is another queue) can make a
  // member's reused descriptor look new.
  using IsMember = std::function<bool(int fd)>;
  void Tick(const IsMember& is_member, Clock::time_point now = Clock::now());
  // How long the role's poll may wait: `normal`, or kByteCheckMs while connections that
  // are not a member's are open.
  int PollTimeoutMs(int normal) const { return silent_.empty() ? normal : kByteCheckMs; }

  size_t silent() const { return silent_.size(); }

 private:
  struct Open {
    Clock::time_point accepted;
    uint64_t delivered = 0;  // bytes on the wire of the messages that reached the role
  };
  // Shuts down those that hold too much (kUnregistered*), every kByteCheckMs.
  void CheckBytes(const IsMember& is_member, Clock::time_point now);
  // What ZeroMQ holds for connection `fd` beyond the messages it delivered.
  uint64_t Buffered(int fd, const Open& open) const;

  zmq::socket_t& socket_;
  const std::string who_;
  const std::string endpoint_;  // the bound ones, for the log
  const size_t cap_;
  const bool curve_;  // CURVE: each frame travels inside a MESSAGE command
  std::unordered_map<int, Open> silent_;  // descriptor -> not a member's yet
  std::unordered_set<int> members_;  // descriptors of members, until disconnected
  uint64_t shut_ = 0;  // shut down since the last log line (the cap)
  uint64_t shut_bytes_ = 0, shut_held_ = 0;  // the same, for what they held
  Clock::time_point checked_;  // CheckBytes' last run
  PeerRateLimiter limiter_{10.0, 1, 4};
};

}  // namespace tfps

#endif  // TFPS_CC_TRANSPORT_CONNECTION_LIMITS_H_

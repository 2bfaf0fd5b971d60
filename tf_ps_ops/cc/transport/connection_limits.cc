#include "tf_ps_ops/cc/transport/connection_limits.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstddef>
#include <cerrno>
#include <cstring>

#include "tf_ps_ops/cc/common/logging.h"

namespace tfps {

uint64_t RaiseDescriptorLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    const rlim_t before = limit.rlim_cur;
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      TFPS_LOG(Debug) << "cannot raise the descriptor limit from " << before << ": "
                      << std::strerror(errno);
      return before;
    }
  }
  return limit.rlim_cur == RLIM_INFINITY ? UINT64_MAX : static_cast<uint64_t>(limit.rlim_cur);
}

int SilentConnections::DefaultCap() {
  const uint64_t limit = RaiseDescriptorLimit();
  if (limit == 0) return 256;
  return static_cast<int>(std::max<uint64_t>(16, std::min<uint64_t>(1024, limit / 4)));
}

SilentConnections::SilentConnections(zmq::socket_t& socket, const std::string& who, int cap,
                                     const std::string& where)
    : socket_(socket),
      who_(who),
      endpoint_(where.empty() ? socket.get(zmq::sockopt::last_endpoint) : where),
      cap_(static_cast<size_t>(cap)),
      curve_(socket.get(zmq::sockopt::mechanism) == ZMQ_CURVE) {}

namespace {

// Handshake and commands (greeting, READY, PONG) a connection may send beyond its messages.
constexpr uint64_t kCommandSlack = 4 << 10;

// The bytes a frame of `size` takes on the wire (ZMTP 3: a flags byte and a 1- or 8-byte
// length; under CURVE inside a MESSAGE command: its name, nonce, MAC and flags).
uint64_t WireBytes(uint64_t size, bool curve) {
  const uint64_t body = curve ? size + 8 + 8 + 16 + 1 : size;
  return body + (body < 256 ? 2 : 9);
}

std::string MiB(uint64_t bytes) { return std::to_string((bytes + (1 << 19)) >> 20) + " MiB"; }

}  // namespace

void SilentConnections::OnMessage(const std::vector<zmq::message_t>& frames) {
  if (frames.size() < 2) return;
  const int fd = SourceFd(frames[1]);
  if (fd < 0 || members_.count(fd) != 0) return;
  // Its ACCEPTED event may still be queued in the monitor: the entry starts here then.
  auto it = silent_.emplace(fd, Open{Clock::now(), 0}).first;
  for (size_t i = 1; i < frames.size(); ++i) {
    it->second.delivered += WireBytes(frames[i].size(), curve_);
  }
}

int SilentConnections::SourceFd(const zmq::message_t& message) {
  // No throw: -1 if unknown.
  return zmq_msg_get(const_cast<zmq_msg_t*>(message.handle()), ZMQ_SRCFD);
}

void SilentConnections::OnMember(int fd) {
  if (fd < 0) return;
  members_.insert(fd);
  if (!silent_.empty()) silent_.erase(fd);
}

bool SilentConnections::OnEvent(int event, int value, Clock::time_point now) {
  uint64_t suppressed = 0;
  switch (event) {
    case ZMQ_EVENT_ACCEPTED:
      // Bounded: the cap holds the table near `cap` entries, the descriptor limit beyond.
      // A descriptor already heard from is a connection whose message came first (or a
      // reused one whose old disconnect is still queued: left alone, the safe side).
      if (members_.count(value) == 0) silent_.emplace(value, Open{now, 0});
      return true;
    case ZMQ_EVENT_DISCONNECTED:
      silent_.erase(value);
      members_.erase(value);
      return false;
    case ZMQ_EVENT_ACCEPT_FAILED:
      if (limiter_.Allow("accept", &suppressed, now)) {
        TFPS_LOG(Warning) << who_ << " could not accept a connection on " << endpoint_ << ": "
                          << std::strerror(value) << " (" << silent_.size()
                          << " open connection(s) have sent nothing yet)"
                          << SuppressedNote(suppressed);
      }
      return true;
    default:
      return false;
  }
}

void SilentConnections::Tick(const IsMember& is_member, Clock::time_point now) {
  CheckBytes(is_member, now);
  if (silent_.size() < cap_) return;
  const auto grace = std::chrono::milliseconds(kSilentGraceMs);
  size_t shut = 0;
  for (auto it = silent_.begin(); it != silent_.end();) {
    if (now - it->second.accepted < grace) {
      ++it;
      continue;
    }
    if (is_member && is_member(it->first)) {
      members_.insert(it->first);
      it = silent_.erase(it);
      continue;
    }
    // ZeroMQ sees the end of the stream and closes the connection (its descriptor too).
    (void)shutdown(it->first, SHUT_RDWR);
    it = silent_.erase(it);
    ++shut;
  }
  shut_ += shut;
  uint64_t suppressed = 0;
  if (shut > 0 && limiter_.Allow("cap", &suppressed, now)) {
    TFPS_LOG(Warning) << who_ << " closed " << shut_ << " connection(s) to " << endpoint_
                      << " that sent nothing for " << kSilentGraceMs / 1000 << " s while at "
                      << "least " << cap_ << " were open without a member's message (the cap: "
                      << "a quarter of the descriptor limit, at most 1024; a port scan, or "
                      << "clients that connect and send nothing?); members are not affected"
                      << SuppressedNote(suppressed);
    shut_ = 0;
  }
}

uint64_t SilentConnections::Buffered(int fd, const Open& open) const {
  tcp_info info{};
  socklen_t length = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0 ||
      length < offsetof(tcp_info, tcpi_bytes_received) + sizeof(info.tcpi_bytes_received)) {
    return 0;  // not TCP, or a kernel before 4.1: not measured
  }
  int queued = 0;  // received by the kernel, not yet read by ZeroMQ
  if (ioctl(fd, FIONREAD, &queued) != 0 || queued < 0) queued = 0;
  const uint64_t read = info.tcpi_bytes_received - std::min<uint64_t>(
                                                       queued, info.tcpi_bytes_received);
  const uint64_t accounted = open.delivered + kCommandSlack;
  return read > accounted ? read - accounted : 0;
}

void SilentConnections::CheckBytes(const IsMember& is_member, Clock::time_point now) {
  if (silent_.empty() || now - checked_ < std::chrono::milliseconds(kByteCheckMs)) return;
  checked_ = now;
  std::vector<std::pair<uint64_t, int>> held;  // bytes, descriptor
  uint64_t total = 0;
  for (const auto& entry : silent_) {
    const uint64_t bytes = Buffered(entry.first, entry.second);
    if (bytes == 0) continue;
    held.emplace_back(bytes, entry.first);
    total += bytes;
  }
  // The largest first: those over the per-connection bound, then until the rest fit.
  std::sort(held.rbegin(), held.rend());
  size_t shut = 0;
  for (const auto& h : held) {
    if (h.first <= kUnregisteredConnectionBytes && total <= kUnregisteredBytes) break;
    total -= h.first;
    silent_.erase(h.second);
    if (is_member && is_member(h.second)) {
      members_.insert(h.second);
      continue;
    }
    (void)shutdown(h.second, SHUT_RDWR);  // ZeroMQ closes it, and frees what it held
    shut_held_ += h.first;
    ++shut;
  }
  shut_bytes_ += shut;
  uint64_t suppressed = 0;
  if (shut > 0 && limiter_.Allow("bytes", &suppressed, now)) {
    TFPS_LOG(Warning) << who_ << " closed " << shut_bytes_ << " connection(s) to " << endpoint_
                      << " that held " << MiB(shut_held_) << " of messages not yet complete "
                      << "before sending a member's message (at most " << MiB(
                             kUnregisteredConnectionBytes)
                      << " each and " << MiB(kUnregisteredBytes) << " together; a client "
                      << "that sends most of a large frame and stops?); members are not "
                      << "affected" << SuppressedNote(suppressed);
    shut_bytes_ = 0;
    shut_held_ = 0;
  }
}

}  // namespace tfps

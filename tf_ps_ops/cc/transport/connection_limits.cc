#include "tf_ps_ops/cc/transport/connection_limits.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
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

SilentConnections::SilentConnections(zmq::socket_t& socket, const std::string& who, int cap)
    : socket_(socket),
      who_(who),
      endpoint_(socket.get(zmq::sockopt::last_endpoint)),
      cap_(static_cast<size_t>(cap)) {}

bool SilentConnections::OnEvent(int event, int value, Clock::time_point now) {
  uint64_t suppressed = 0;
  switch (event) {
    case ZMQ_EVENT_ACCEPTED:
      // Bounded: the cap holds the table near `cap` entries, the descriptor limit beyond.
      // A descriptor already heard from is a connection whose message came first (or a
      // reused one whose old disconnect is still queued: left alone, the safe side).
      if (spoken_.count(value) == 0) silent_[value] = now;
      return true;
    case ZMQ_EVENT_DISCONNECTED:
      silent_.erase(value);
      spoken_.erase(value);
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

void SilentConnections::Tick(Clock::time_point now) {
  if (silent_.size() < cap_) return;
  const auto grace = std::chrono::milliseconds(kSilentGraceMs);
  size_t shut = 0;
  for (auto it = silent_.begin(); it != silent_.end();) {
    if (now - it->second < grace) {
      ++it;
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
                      << "least " << cap_ << " were open without a word (the cap: a quarter "
                      << "of the descriptor limit, at most 1024; a port scan, or clients that "
                      << "connect and send nothing?); members are not affected"
                      << SuppressedNote(suppressed);
    shut_ = 0;
  }
}

}  // namespace tfps

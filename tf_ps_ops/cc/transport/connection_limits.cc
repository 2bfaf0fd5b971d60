#include "tf_ps_ops/cc/transport/connection_limits.h"

#include <sys/resource.h>

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

int HandshakeLimit::DefaultCap() {
  const uint64_t limit = RaiseDescriptorLimit();
  if (limit == 0) return 256;
  return static_cast<int>(std::max<uint64_t>(16, std::min<uint64_t>(1024, limit / 4)));
}

HandshakeLimit::HandshakeLimit(zmq::socket_t& socket, const std::string& who, int cap)
    : socket_(socket),
      who_(who),
      endpoint_(socket.get(zmq::sockopt::last_endpoint)),
      cap_(cap) {}

bool HandshakeLimit::OnEvent(int event, int value, Clock::time_point now) {
  uint64_t suppressed = 0;
  switch (event) {
    case ZMQ_EVENT_ACCEPTED:
      if (++pending_ >= cap_ && !closed_) Close(now);
      return true;
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
    case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      pending_ = std::max(0, pending_ - 1);
      return event != ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL;  // the caller logs that one
    case ZMQ_EVENT_ACCEPT_FAILED:
      if (limiter_.Allow("accept", &suppressed, now)) {
        TFPS_LOG(Warning) << who_ << " could not accept a connection on " << endpoint_ << ": "
                          << std::strerror(value) << " (" << pending_ << " connection(s) "
                          << "still in ZeroMQ's handshake)" << SuppressedNote(suppressed);
      }
      // Out of descriptors, the listener stays readable and ZeroMQ retries in a busy loop:
      // close it until connections have ended.
      if ((value == EMFILE || value == ENFILE) && !closed_) Close(now);
      return true;
    default:
      return false;
  }
}

void HandshakeLimit::Close(Clock::time_point now) {
  try {
    socket_.unbind(endpoint_);
  } catch (const zmq::error_t& e) {
    TFPS_LOG(Warning) << who_ << " could not stop listening on " << endpoint_ << ": "
                      << e.what();
    return;
  }
  closed_ = true;
  closed_at_ = now;
  uint64_t suppressed = 0;
  if (limiter_.Allow("close", &suppressed, now)) {
    TFPS_LOG(Warning) << who_ << " stops accepting connections on " << endpoint_ << " for up "
                      << "to " << kHandshakeIvlMs / 1000 << " s: " << pending_ << " connection(s) "
                      << "have not completed ZeroMQ's handshake (the cap is " << cap_ << "; a port "
                      << "scan, or clients that connect and send nothing?); members already "
                      << "connected are served, new ones retry" << SuppressedNote(suppressed);
  }
}

void HandshakeLimit::Tick(Clock::time_point now) {
  if (!closed_) return;
  if (pending_ <= cap_ / 2) {
    Reopen("enough pending connections ended");
  } else if (now - closed_at_ > std::chrono::milliseconds(kHandshakeIvlMs + 1000)) {
    pending_ = 0;  // every connection pending at the close has ended by now
    Reopen("the handshake interval passed");
  }
}

void HandshakeLimit::Reopen(const char* why) {
  try {
    socket_.bind(endpoint_);
  } catch (const zmq::error_t& e) {  // the port taken meanwhile: try again next turn
    uint64_t suppressed = 0;
    if (limiter_.Allow("reopen", &suppressed)) {
      TFPS_LOG(Error) << who_ << " cannot listen on " << endpoint_ << " again: " << e.what()
                      << "; retrying" << SuppressedNote(suppressed);
    }
    return;
  }
  closed_ = false;
  TFPS_LOG(Info) << who_ << " accepts connections on " << endpoint_ << " again (" << why
                 << ")";
}

}  // namespace tfps

#include "tf_ps_ops/cc/transport/zmq_util.h"

#include "tf_ps_ops/cc/transport/connection_limits.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/transport/auth.h"

namespace tfps {

namespace {

void ReleaseHolder(void* /*data*/, void* hint) { delete static_cast<std::shared_ptr<void>*>(hint); }

// The routing frame of a ROUTER send, without blocking: false when the peer's queue is
// full (with ZMQ_ROUTER_MANDATORY; without it ZeroMQ drops the message itself). Only this
// first frame can be refused: once it is queued the rest of the message always is.
bool SendIdentity(zmq::socket_t& socket, const std::string& identity) {
  return socket.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait)
      .has_value();
}

Status QueueFull(const std::string& identity) {
  return Unavailable("dropped a message to '" + EscapeForLog(identity) + "': " +
                     std::to_string(kSocketHwm) + " messages to it are queued unread");
}

}  // namespace

zmq::message_t ZeroCopyMessage(const void* data, size_t size, std::shared_ptr<void> holder) {
  if (size == 0) return zmq::message_t();
  auto* hint = new std::shared_ptr<void>(std::move(holder));
  // ZeroMQ only reads the buffer; its API takes a non-const pointer.
  return zmq::message_t(const_cast<void*>(data), size, &ReleaseHolder, hint);
}

Status SendMessage(zmq::socket_t& socket, const std::string& identity, const Head& head,
                   zmq::message_t payload) {
  try {
    if (!identity.empty() && !SendIdentity(socket, identity)) return QueueFull(identity);
    const std::string encoded = EncodeHead(head);
    socket.send(zmq::buffer(encoded), zmq::send_flags::sndmore);
    socket.send(payload, zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    return Unavailable(std::string("send failed: ") + e.what());
  }
  return Status::Ok();
}

Status SendBatch(zmq::socket_t& socket, const std::string& identity, int sender, Batch* batch) {
  std::vector<Encoded>* messages = &batch->messages;
  batch->bytes = 0;
  if (messages->empty()) return Status::Ok();
  try {
    if (!identity.empty() && !SendIdentity(socket, identity)) {
      messages->clear();
      return QueueFull(identity);
    }
    if (messages->size() > 1) {
      Head batch;
      batch.header.type = static_cast<uint16_t>(MsgType::kBatch);
      batch.header.sender = sender;
      batch.header.count = messages->size();
      const std::string encoded = EncodeHead(batch);
      socket.send(zmq::buffer(encoded), zmq::send_flags::sndmore);
    }
    for (size_t i = 0; i < messages->size(); ++i) {
      Encoded& m = (*messages)[i];
      socket.send(zmq::buffer(m.head), zmq::send_flags::sndmore);
      socket.send(m.payload, i + 1 < messages->size() ? zmq::send_flags::sndmore
                                                      : zmq::send_flags::none);
    }
  } catch (const zmq::error_t& e) {
    messages->clear();
    return Unavailable(std::string("send failed: ") + e.what());
  }
  messages->clear();
  return Status::Ok();
}

Status SendText(zmq::socket_t& socket, const std::string& identity, const Header& header,
                const std::string& text) {
  Head head;
  head.header = header;
  return SendMessage(socket, identity, head, zmq::message_t(text.data(), text.size()));
}

int Poll(zmq::pollitem_t* items, size_t count, int timeout_ms) {
  try {
    return zmq::poll(items, count, std::chrono::milliseconds(timeout_ms));
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return 0;
    throw;
  }
}

bool RecvFrames(zmq::socket_t& socket, std::vector<zmq::message_t>* frames) {
  frames->clear();
  zmq::message_t first;
  if (!socket.recv(first, zmq::recv_flags::dontwait)) return false;
  bool more = first.more();
  frames->push_back(std::move(first));
  while (more) {
    zmq::message_t part;
    // The rest of a multipart message is already here once its first frame is.
    (void)socket.recv(part, zmq::recv_flags::none);
    more = part.more();
    frames->push_back(std::move(part));
  }
  return true;
}

void SetCommonOptions(zmq::socket_t& socket, const Config& config) {
  // LoadConfig refuses larger values; the clamp keeps a hand-made Config from aborting
  // inside ZeroMQ (EINVAL from setsockopt is an exception here).
  const double hb_s = std::min(config.heartbeat_timeout_s, kMaxHeartbeatTimeoutS);
  const int hb_timeout_ms = static_cast<int>(hb_s * 1000);
  socket.set(zmq::sockopt::linger, kSocketLingerMs);
  socket.set(zmq::sockopt::handshake_ivl, kHandshakeIvlMs);  // connection_limits.h
  socket.set(zmq::sockopt::heartbeat_ivl, 1000);
  socket.set(zmq::sockopt::heartbeat_timeout, hb_timeout_ms);
  socket.set(zmq::sockopt::heartbeat_ttl, hb_timeout_ms);
  socket.set(zmq::sockopt::sndhwm, kSocketHwm);
  socket.set(zmq::sockopt::rcvhwm, kSocketRcvHwm);
  if (config.max_message_bytes > 0) {
    socket.set(zmq::sockopt::maxmsgsize, config.max_message_bytes);
  }
  socket.set(zmq::sockopt::tcp_keepalive, 1);
  ApplyCurveOptions(socket, config);
}

void PinToIoThread(zmq::socket_t& socket, int index, const Config& config) {
  const int threads = std::max(1, std::min(config.io_threads, kMaxIoThreads));
  socket.set(zmq::sockopt::affinity, uint64_t{1} << (index % threads));
}

Monitor::Monitor(zmq::context_t& context, zmq::socket_t& socket, const std::string& name,
                 int events)
    : pair_(context, zmq::socket_type::pair) {
  // A flood of connections makes a flood of events: a full queue would drop some (a lost
  // disconnect is a member's death unseen), so it holds far more than ZeroMQ's 1,000.
  pair_.set(zmq::sockopt::rcvhwm, 100000);
  const std::string endpoint = "inproc://tfps-monitor-" + name;
  if (zmq_socket_monitor(socket.handle(), endpoint.c_str(), events) != 0) {
    throw zmq::error_t();
  }
  pair_.connect(endpoint);
}

bool Monitor::Read(int* event, int* value, std::string* address) {
  zmq::message_t head;
  if (!pair_.recv(head, zmq::recv_flags::dontwait)) return false;
  zmq::message_t addr;
  (void)pair_.recv(addr, zmq::recv_flags::none);
  if (head.size() < 6) return false;
  uint16_t ev = 0;
  uint32_t val = 0;
  std::memcpy(&ev, head.data(), 2);
  std::memcpy(&val, static_cast<const char*>(head.data()) + 2, 4);
  *event = ev;
  *value = static_cast<int>(val);
  *address = addr.to_string();
  return true;
}

std::string StripBrackets(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

namespace {

std::string TcpEndpoint(const std::string& host, const std::string& port) {
  const std::string bare = StripBrackets(host);
  const bool v6 = bare.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + bare + "]" : bare) + ":" + port;
}

}  // namespace

std::string TcpAddress(const std::string& host, int port) {
  return TcpEndpoint(host, std::to_string(port));
}

std::string TcpAddressOf(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return "tcp://" + host_port;  // ZeroMQ refuses it, named
  return TcpEndpoint(host_port.substr(0, colon), host_port.substr(colon + 1));
}

namespace {

void SetIpv6For(zmq::socket_t& socket, const std::string& endpoint) {
  if (endpoint.rfind("tcp://[", 0) == 0) socket.set(zmq::sockopt::ipv6, 1);
}

}  // namespace

void BindTcp(zmq::socket_t& socket, const std::string& endpoint) {
  SetIpv6For(socket, endpoint);
  socket.bind(endpoint);
}

void ConnectTcp(zmq::socket_t& socket, const std::string& endpoint) {
  SetIpv6For(socket, endpoint);
  socket.connect(endpoint);
}

int BoundPort(zmq::socket_t& socket) {
  const std::string endpoint = socket.get(zmq::sockopt::last_endpoint);
  return std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
}

std::string PeerAddress(zmq::message_t& message) {
  const char* addr = zmq_msg_gets(message.handle(), "Peer-Address");
  return addr == nullptr ? std::string() : std::string(addr);
}

}  // namespace tfps

#include "tf_ps_ops/cc/transport/metrics_http.h"

#include <chrono>
#include <map>
#include <vector>

#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/common/metrics.h"
#include "tf_ps_ops/cc/transport/auth.h"
#include "tf_ps_ops/cc/transport/zmq_util.h"

namespace tfps {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> g_port{-1};

struct HttpConnection {
  std::string request;
  Clock::time_point opened;
};

std::string Response(const char* status, const char* type, const std::string& body) {
  return std::string("HTTP/1.1 ") + status + "\r\nContent-Type: " + type +
         "\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

// The answer to a whole request (its head, up to the blank line).
std::string Answer(const std::string& request) {
  const size_t line_end = request.find_first_of("\r\n");
  const std::string line = request.substr(0, line_end);
  if (line.rfind("GET ", 0) != 0) {
    return Response("405 Method Not Allowed", "text/plain", "only GET /metrics\n");
  }
  const size_t path_end = line.find(' ', 4);
  const std::string path = line.substr(4, path_end == std::string::npos ? std::string::npos
                                                                         : path_end - 4);
  if (path != "/metrics" && path != "/") {
    return Response("404 Not Found", "text/plain", "only GET /metrics\n");
  }
  metrics::metrics_scrapes.Add();
  return Response("200 OK", "text/plain; version=0.0.4; charset=utf-8", RenderMetrics());
}

// Sends [id, data] without waiting; false when it could not (the client reads nothing).
bool SendTo(zmq::socket_t& socket, const std::string& id, const std::string& data) {
  try {
    if (!socket.send(zmq::buffer(id), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return false;
    }
    return socket.send(zmq::buffer(data), zmq::send_flags::dontwait).has_value();
  } catch (const zmq::error_t&) {
    return false;
  }
}

// ZMQ_STREAM names connections by a counter (a zero byte, then 32 bits big-endian), so a
// newer connection has the larger id.
bool IsNewer(const std::string& id, const std::string& than) {
  return id.size() != than.size() ? id.size() > than.size() : id > than;
}

void Close(zmq::socket_t& socket, const std::string& id) { SendTo(socket, id, ""); }

// Full: the connection open longest goes, so a flood of idle connections cannot keep a
// scraper out (each of them is closed within kRequestTimeoutMs anyway).
void CloseOldest(zmq::socket_t& socket, std::map<std::string, HttpConnection>* open) {
  auto oldest = open->begin();
  for (auto it = open->begin(); it != open->end(); ++it) {
    if (it->second.opened < oldest->second.opened) oldest = it;
  }
  Close(socket, oldest->first);
  open->erase(oldest);
}

}  // namespace

int MetricsPort() { return g_port.load(); }

Status MetricsEndpoint::StartIfAsked(const Config& config, const std::string& what,
                                     std::unique_ptr<MetricsEndpoint>* out) {
  out->reset();
  if (config.metrics_port < 0) return Status::Ok();
  const std::string name = what + "'s metrics port (TFPS_METRICS_PORT)";
  TFPS_RETURN_IF_ERROR(CheckBindAllowed(config, name.c_str()));
  std::unique_ptr<MetricsEndpoint> e(new MetricsEndpoint());
  try {
    e->socket_ = std::make_unique<zmq::socket_t>(e->context_, zmq::socket_type::stream);
    e->socket_->set(zmq::sockopt::linger, 0);
    e->socket_->set(zmq::sockopt::sndhwm, 256);  // answers queued per connection, bounded
    BindTcp(*e->socket_, BindEndpoint(config, config.metrics_port, name.c_str()));
    e->port_ = BoundPort(*e->socket_);
  } catch (const zmq::error_t& err) {
    return Unavailable(name + " cannot listen on " + config.bind + ":" +
                       std::to_string(config.metrics_port) + ": " + err.what() +
                       " (another process holds it? give each process its own port, or 0)");
  }
  g_port = e->port_;
  TFPS_LOG(Info) << "metrics: http://" << (config.bind == "*" ? "0.0.0.0" : config.bind) << ":"
                 << e->port_ << "/metrics";
  e->thread_ = std::thread([raw = e.get()] { raw->Loop(); });
  *out = std::move(e);
  return Status::Ok();
}

MetricsEndpoint::~MetricsEndpoint() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  g_port = -1;
}

// One thread: ZMQ_STREAM delivers [connection id, bytes]; an empty message opens or
// closes a connection. Every exception ends up in the log, never outside the thread.
void MetricsEndpoint::Loop() {
  std::map<std::string, HttpConnection> open;
  std::vector<zmq::message_t> frames;
  std::string newest;  // the latest connection's id
  while (!stop_) {
    try {
      zmq::pollitem_t item{socket_->handle(), 0, ZMQ_POLLIN, 0};
      Poll(&item, 1, 100);
      for (int i = 0; i < 256 && RecvFrames(*socket_, &frames); ++i) {
        if (frames.size() != 2) continue;
        const std::string id = frames[0].to_string();
        auto it = open.find(id);
        if (frames[1].size() == 0) {  // opened, or closed (by the client, or after us)
          if (it != open.end()) {
            open.erase(it);
          } else if (IsNewer(id, newest)) {  // ids grow: an older one is a close
            newest = id;
            if (open.size() >= kMaxConnections) CloseOldest(*socket_, &open);
            open[id] = HttpConnection{"", Clock::now()};
          }
          continue;
        }
        if (it == open.end()) continue;  // one we closed already
        std::string& request = it->second.request;
        request.append(frames[1].data<char>(),
                       std::min(frames[1].size(), kMaxRequestBytes + 1 - request.size()));
        const bool whole = request.find("\r\n\r\n") != std::string::npos ||
                           request.find("\n\n") != std::string::npos;
        if (!whole && request.size() <= kMaxRequestBytes) continue;
        const std::string answer =
            whole ? Answer(request)
                  : Response("431 Request Header Fields Too Large", "text/plain", "too large\n");
        SendTo(*socket_, id, answer);
        Close(*socket_, id);
        open.erase(it);
      }
      const auto now = Clock::now();
      for (auto it = open.begin(); it != open.end();) {
        if (now - it->second.opened > std::chrono::milliseconds(kRequestTimeoutMs)) {
          Close(*socket_, it->first);
          it = open.erase(it);
        } else {
          ++it;
        }
      }
    } catch (const std::exception& e) {
      TFPS_LOG(Warning) << "metrics port: " << e.what();
    }
  }
  socket_->close();
}

}  // namespace tfps

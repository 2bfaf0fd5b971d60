#include "tf_ps_ops/cc/transport/auth.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/transport/zmq_util.h"

namespace tfps {

namespace {

// The job's public key (Z85) from its secret; empty if the secret is not a key.
std::string PublicKeyOf(const std::string& secret_z85) {
  char public_z85[41] = {0};
  if (zmq_curve_public(public_z85, secret_z85.c_str()) != 0) return "";
  return public_z85;
}

bool IsLoopback(const std::string& bind) {
  if (bind == "localhost" || bind == "lo" || bind.rfind("127.", 0) == 0) return true;
  in6_addr v6;  // ::1, or an IPv4-mapped 127.x.y.z
  if (inet_pton(AF_INET6, StripBrackets(bind).c_str(), &v6) != 1) return false;
  return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
}

}  // namespace

void ApplyCurveOptions(zmq::socket_t& socket, const Config& config) {
  if (config.auth_secret_key.empty()) return;
  const std::string public_z85 = PublicKeyOf(config.auth_secret_key);
  const int type = socket.get(zmq::sockopt::type);
  if (type == ZMQ_ROUTER) {
    socket.set(zmq::sockopt::curve_server, 1);
    socket.set(zmq::sockopt::curve_secretkey, config.auth_secret_key);
    socket.set(zmq::sockopt::zap_domain, "tfps");
  } else {
    socket.set(zmq::sockopt::curve_serverkey, public_z85);
    socket.set(zmq::sockopt::curve_publickey, public_z85);
    socket.set(zmq::sockopt::curve_secretkey, config.auth_secret_key);
  }
}

std::unique_ptr<ZapHandler> ZapHandler::StartIfKeyed(zmq::context_t& context,
                                                     const Config& config) {
  if (config.auth_secret_key.empty()) return nullptr;
  return std::make_unique<ZapHandler>(context, PublicKeyOf(config.auth_secret_key));
}

ZapHandler::ZapHandler(zmq::context_t& context, const std::string& public_z85)
    : socket_(context, zmq::socket_type::rep), public_key_(32, '\0') {
  zmq_z85_decode(reinterpret_cast<uint8_t*>(&public_key_[0]), public_z85.c_str());
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind("inproc://zeromq.zap.01");
  // The socket moves to the handler's thread here (thread creation is a full barrier).
  thread_ = std::thread([this] { Loop(); });
}

ZapHandler::~ZapHandler() {
  stop_ = true;
  thread_.join();
}

void ZapHandler::Loop() {
  std::vector<zmq::message_t> request;
  while (!stop_) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    try {
      Poll(&item, 1, 100);
      while (RecvFrames(socket_, &request)) Answer(request);
    } catch (const std::exception& e) {  // never leaves the thread; a refusal is the default
      TFPS_LOG(Error) << "authentication handler: " << e.what();
    }
  }
  socket_.close();
}

// ZAP 1.0 (rfc.zeromq.org/spec/27): [version, request id, domain, address, identity,
// mechanism, credentials...] -> [version, request id, status, text, user id, metadata].
void ZapHandler::Answer(std::vector<zmq::message_t>& request) {
  const bool well_formed = request.size() >= 6 && request[0].to_string() == "1.0";
  const bool admitted = well_formed && request.size() == 7 &&
                        request[5].to_string() == "CURVE" && request[6].size() == 32 &&
                        std::memcmp(request[6].data(), public_key_.data(), 32) == 0;
  const std::string address = request.size() > 3 ? request[3].to_string() : "?";
  if (!admitted) {
    uint64_t suppressed = 0;
    if (limiter_.Allow(address, &suppressed)) {
      TFPS_LOG(Warning) << "refused a connection from " << EscapeForLog(address)
                        << ": it does not hold this job's key (TFPS_AUTH_KEY_FILE)"
                        << SuppressedNote(suppressed);
    }
  }
  const std::string id = request.size() > 1 ? request[1].to_string() : "";
  const char* frames[] = {"1.0", nullptr, admitted ? "200" : "400",
                          admitted ? "OK" : "not this job's key", "", ""};
  for (int i = 0; i < 6; ++i) {
    const std::string part = i == 1 ? id : frames[i];
    socket_.send(zmq::buffer(part), i < 5 ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

Status CheckBindAllowed(const Config& config, const char* what) {
  if (!config.auth_secret_key.empty() || IsLoopback(config.bind) || config.insecure) {
    return Status::Ok();
  }
  return FailedPrecondition(
      std::string(what) + " would listen on " +
      (config.bind == "*" ? std::string("every interface") : config.bind) +
      " without authentication, where anyone who reaches it can join the job or read its "
      "tensors: give every role the job's key (TFPS_AUTH_KEY_FILE, `ps_server --gen-key`; "
      "tfps-run makes one), or bind loopback only (TFPS_BIND=127.0.0.1), or accept the risk "
      "on a trusted network with TFPS_INSECURE=1 (docs/security.md)");
}

std::string BindEndpoint(const Config& config, int port, const char* what) {
  if (config.auth_secret_key.empty() && !IsLoopback(config.bind)) {
    TFPS_LOG(Warning) << what << " listens on " << (config.bind == "*" ? "every interface" : config.bind)
                      << " without authentication: anyone who reaches port "
                      << (port == 0 ? std::string("(any)") : std::to_string(port))
                      << " can join the job or read its tensors; set TFPS_AUTH_KEY_FILE "
                      << "(docs/security.md) or TFPS_BIND=127.0.0.1 for one host";
  }
  return TcpAddress(config.bind, port);
}

Status WriteNewKeyFile(const std::string& path) {
  char public_z85[41], secret_z85[41];
  if (zmq_curve_keypair(public_z85, secret_z85) != 0) {
    return Unavailable("this libzmq cannot make CURVE keys (built without libsodium?)");
  }
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return InvalidArgument("cannot create " + path + ": " + std::strerror(errno));
  const std::string text = std::string(secret_z85) + "\n";
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok ? Status::Ok() : Unavailable("cannot write " + path);
}

}  // namespace tfps

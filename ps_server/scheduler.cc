#include "ps_server/scheduler.h"

#include <chrono>

#include "ps_server/exit_codes.h"
#include "tf_ps_ops/cc/cluster/messages.h"
#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/transport/auth.h"
#include "tf_ps_ops/cc/transport/zmq_util.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

Scheduler::Scheduler(int num_workers, int num_servers, const Config& config)
    : num_workers_(num_workers),
      num_servers_(num_servers),
      config_(config),
      context_(1),
      router_(context_, zmq::socket_type::router) {
  SetCommonOptions(router_, config_);
  zap_ = ZapHandler::StartIfKeyed(context_, config_);  // before the socket binds
}

Status Scheduler::Bind(int port, int* bound_port) {
  try {
    router_.bind(BindEndpoint(config_, port, "the scheduler"));
  } catch (const zmq::error_t& e) {
    return Unavailable("scheduler cannot bind port " + std::to_string(port) + ": " + e.what());
  }
  *bound_port = BoundPort(router_);
  return Status::Ok();
}

int Scheduler::Run(const std::atomic<bool>& stop) {
  Monitor monitor(context_, router_, "scheduler", ZMQ_EVENT_DISCONNECTED);
  using Clock = std::chrono::steady_clock;
  auto last_progress = Clock::now();
  Clock::time_point conflict_at;  // when workers were found to disagree (conflict_)
  std::vector<zmq::message_t> frames;
  while (!stop) {
    zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                               {monitor.socket().handle(), 0, ZMQ_POLLIN, 0}};
    Poll(items, 2, 200);
    while (RecvFrames(router_, &frames)) {
      try {
        OnMessage(frames);
      } catch (const std::exception& e) {  // no exception leaves the scheduler's thread
        TFPS_LOG(Error) << "dropped a message that could not be handled: " << e.what();
      }
    }
    int event = 0, value = 0;
    std::string address;
    while (monitor.Read(&event, &value, &address)) {
      if (event == ZMQ_EVENT_DISCONNECTED) OnDisconnect(value);
    }
    if (!conflict_.empty()) {
      if (conflict_at == Clock::time_point()) conflict_at = Clock::now();
      if (Clock::now() - conflict_at > std::chrono::seconds(2)) break;  // refusals are out
      continue;
    }
    if (ready_) {
      int finished = lost_workers_;
      for (const auto& w : workers_) finished += w.second.done ? 1 : 0;
      if (finished >= num_workers_) break;
    } else if (Clock::now() - last_progress > std::chrono::seconds(10)) {
      TFPS_LOG(Info) << "still waiting for " << Waiting() << " to register";
      last_progress = Clock::now();
    }
  }
  if (stop) {
    int finished = lost_workers_;
    for (const auto& w : workers_) finished += w.second.done ? 1 : 0;
    return ready_ && finished >= num_workers_ ? 0 : kStoppedMidJob;
  }
  if (!conflict_.empty()) {
    TFPS_LOG(Error) << "the job cannot start: " << conflict_ << "; exiting with 1";
    return 1;
  }
  if (lost_workers_ > 0) {
    TFPS_LOG(Error) << lost_workers_ << " worker(s) died before shutting down; exiting with 1";
    return 1;
  }
  TFPS_LOG(Info) << "every worker said goodbye; exiting";
  return 0;
}

void Scheduler::OnMessage(std::vector<zmq::message_t>& frames) {
  const std::string identity = frames[0].to_string();
  uint64_t suppressed = 0;
  if (frames.size() < 2 || frames.size() > 3) {
    if (limiter_.Allow(identity, &suppressed)) {
      TFPS_LOG(Warning) << "dropped a message of " << frames.size() << " frames from '"
                        << EscapeForLog(identity) << "'" << SuppressedNote(suppressed);
    }
    return;
  }
  Head head;
  const size_t payload = frames.size() == 3 ? frames[2].size() : 0;
  Status s = DecodeHead(frames[1].data(), frames[1].size(), payload, &head);
  if (!s.ok()) {
    Refuse(identity, s.code(), s.message(), "a malformed message");
    return;
  }
  const auto type = static_cast<MsgType>(head.header.type);
  if (type == MsgType::kRegister && frames.size() == 3) {
    OnRegister(identity, frames[2], frames[1].get(ZMQ_SRCFD));
  } else if (type == MsgType::kBye) {
    for (auto& w : workers_) {
      if (w.second.identity == identity) w.second.done = true;
    }
  } else if (limiter_.Allow(identity, &suppressed)) {
    TFPS_LOG(Warning) << "dropped an unexpected message of type " << head.header.type
                      << " from '" << EscapeForLog(identity) << "'" << SuppressedNote(suppressed);
  }
}

void Scheduler::OnRegister(const std::string& identity, zmq::message_t& payload, int fd) {
  if (!conflict_.empty()) {
    Refuse(identity, Code::kInvalidArgument, conflict_);
    return;
  }
  if (ready_) {
    Refuse(identity, Code::kFailedPrecondition,
           "the cluster is already complete; a late or restarted process cannot join");
    return;
  }
  RegisterRequest request;
  Status s = ParseRegister(payload.to_string(), &request);
  if (!s.ok()) {
    Refuse(identity, s.code(), s.message());
    return;
  }
  Member m;
  m.identity = identity;
  m.fd = fd;
  m.host = request.host.empty() ? PeerAddress(payload) : request.host;
  m.port = request.port;  // servers: their port; workers: their peer port, 0 for none
  if (request.role == Role::kServer) {
    if (static_cast<int>(servers_.size()) >= num_servers_) {
      Refuse(identity, Code::kInvalidArgument,
             "already have all " + std::to_string(num_servers_) + " servers (--num-servers)");
      return;
    }
    servers_.push_back(m);
    TFPS_LOG(Info) << "server " << servers_.size() - 1 << " registered from " << m.host << ":"
                   << m.port;
  } else {
    const int rank = request.rank;
    if (request.size != num_workers_ || rank >= num_workers_ || workers_.count(rank)) {
      Refuse(identity, Code::kInvalidArgument,
             "worker rank " + std::to_string(rank) + " of size " + std::to_string(request.size) +
                 " does not fit a job of " + std::to_string(num_workers_) +
                 " workers, or that rank registered twice");
      return;
    }
    if (!ConsistencyAgrees(identity, request)) return;
    workers_[rank] = m;
    TFPS_LOG(Info) << "worker " << rank << " registered from " << m.host;
  }
  if (!complete()) {
    Reply(identity, FormatWaiting(Waiting()));
    return;
  }
  ready_ = true;
  AnnounceCluster();
}

bool Scheduler::ConsistencyAgrees(const std::string& identity, const RegisterRequest& request) {
  if (workers_.empty()) {
    consistency_ = request.consistency;
    return true;
  }
  if (request.consistency == consistency_) return true;
  const auto& first = *workers_.begin();
  conflict_ = "workers disagree on the consistency model: worker " +
              std::to_string(first.first) + " asks for " + ConsistencyName(consistency_) +
              ", worker " + std::to_string(request.rank) + " for " +
              ConsistencyName(request.consistency) +
              "; set the same TFPS_CONSISTENCY (or init(consistency=...)) on every worker";
  Refuse(identity, Code::kInvalidArgument, conflict_);
  for (const auto& w : workers_) Refuse(w.second.identity, Code::kInvalidArgument, conflict_);
  for (const Member& s : servers_) Refuse(s.identity, Code::kInvalidArgument, conflict_);
  return false;
}

void Scheduler::AnnounceCluster() {
  ClusterView view;
  view.consistency = consistency_;
  for (const Member& s : servers_) view.servers.push_back(s.host + ":" + std::to_string(s.port));
  for (const auto& w : workers_) {
    view.worker_hosts.push_back(w.second.host);
    view.worker_peers.push_back(w.second.host + ":" + std::to_string(w.second.port));
  }
  for (size_t i = 0; i < servers_.size(); ++i) {
    ClusterView mine = view;
    mine.worker_peers.clear();  // servers take no peer traffic
    mine.server_id = static_cast<int>(i);
    Reply(servers_[i].identity, FormatClusterView(mine));
  }
  for (const auto& w : workers_) Reply(w.second.identity, FormatClusterView(view));
  std::string servers;
  for (const std::string& s : view.servers) servers += (servers.empty() ? "" : ",") + s;
  TFPS_LOG(Info) << "cluster complete: " << num_servers_ << " server(s) [" << servers << "], "
                 << num_workers_ << " worker(s), consistency " << ConsistencyName(consistency_);
}

void Scheduler::OnDisconnect(int fd) {
  for (auto& w : workers_) {
    if (w.second.fd != fd || w.second.done) continue;
    TFPS_LOG(Error) << "worker " << w.first << " (" << w.second.host
                    << ") disconnected without shutting down (did the process die?)";
    w.second.fd = -1;
    w.second.done = true;
    ++lost_workers_;
  }
}

void Scheduler::Reply(const std::string& identity, const std::string& text) {
  Header h;
  h.type = static_cast<uint16_t>(MsgType::kRegisterReply);
  Status s = SendText(router_, identity, h, text);
  if (!s.ok()) TFPS_LOG(Warning) << "could not answer a registrant: " << s.message();
}

// Rate-limited per peer, logging and answering alike (common/rate_limit.h).
void Scheduler::Refuse(const std::string& identity, Code code, const std::string& why,
                       const char* what) {
  uint64_t suppressed = 0;
  if (!limiter_.Allow(identity, &suppressed)) return;
  TFPS_LOG(Warning) << "refused " << what << " from '" << EscapeForLog(identity) << "': " << why
                    << SuppressedNote(suppressed);
  Header h;
  h.type = static_cast<uint16_t>(MsgType::kError);
  h.status = static_cast<uint32_t>(code);
  (void)SendText(router_, identity, h, why);
}

std::string Scheduler::Waiting() const {
  return std::to_string(num_servers_ - static_cast<int>(servers_.size())) + " of " +
         std::to_string(num_servers_) + " servers and " +
         std::to_string(num_workers_ - static_cast<int>(workers_.size())) + " of " +
         std::to_string(num_workers_) + " workers";
}

bool Scheduler::complete() const {
  return static_cast<int>(servers_.size()) == num_servers_ &&
         static_cast<int>(workers_.size()) == num_workers_;
}

}  // namespace tfps

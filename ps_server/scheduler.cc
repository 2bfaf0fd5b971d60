#include "ps_server/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>

#include "ps_server/exit_codes.h"
#include "tf_ps_ops/cc/cluster/messages.h"
#include "tf_ps_ops/cc/cluster/notice.h"
#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/common/metrics.h"
#include "tf_ps_ops/cc/transport/auth.h"
#include "tf_ps_ops/cc/transport/connection_limits.h"
#include "tf_ps_ops/cc/transport/zmq_util.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

namespace {

constexpr int64_t kSchedulerMaxMessageBytes = 1 << 20;

}  // namespace

Scheduler::Scheduler(int num_workers, int num_servers, const Config& config)
    : num_workers_(num_workers),
      num_servers_(num_servers),
      config_(config),
      context_(1),
      router_(context_, zmq::socket_type::router),
      liveness_(config.heartbeat_timeout_s) {
  SetCommonOptions(router_, config_);
  // Everything a scheduler is sent is small (a registration, a notice of at most
  // kMaxNoticeBytes, a pong, a goodbye): a frame in progress, which ZeroMQ buffers whole
  // before we see it, costs a member's connection at most this, not TFPS_MAX_MESSAGE_BYTES.
  router_.set(zmq::sockopt::maxmsgsize,
              std::min<int64_t>(config_.max_message_bytes, kSchedulerMaxMessageBytes));
  zap_ = ZapHandler::StartIfKeyed(context_, config_);  // before the socket binds
}

Status Scheduler::Bind(int port, int* bound_port) {
  TFPS_RETURN_IF_ERROR(CheckBindAllowed(config_, "the scheduler"));
  try {
    BindTcp(router_, BindEndpoint(config_, port, "the scheduler"));
  } catch (const zmq::error_t& e) {
    return Unavailable("scheduler cannot bind port " + std::to_string(port) + ": " + e.what());
  }
  *bound_port = BoundPort(router_);
  return Status::Ok();
}

int Scheduler::Run(const std::atomic<bool>& stop) {
  Monitor monitor(context_, router_, "scheduler", SilentConnections::kEvents);
  SilentConnections silent(router_, "the scheduler");
  using Clock = std::chrono::steady_clock;
  auto last_progress = Clock::now();
  Clock::time_point conflict_at;  // when workers were found to disagree (conflict_)
  std::vector<zmq::message_t> frames;
  bool abandoning = false;  // stopped before the cluster was complete (AbandonRendezvous)
  while (true) {
    if (stop && !abandoning) {
      if (ready_ || !conflict_.empty()) break;
      if (workers_.empty() && servers_.empty()) break;  // nobody to tell
      AbandonRendezvous();
      abandoning = true;
    }
    zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                               {monitor.socket().handle(), 0, ZMQ_POLLIN, 0}};
    Poll(items, 2, silent.PollTimeoutMs(200));
    TakeMessages(silent, &frames);
    int event = 0, value = 0;
    std::string address;
    std::vector<int> closed;
    while (monitor.Read(&event, &value, &address)) {
      if (silent.OnEvent(event, value)) continue;
      if (event == ZMQ_EVENT_DISCONNECTED) closed.push_back(value);
    }
    if (!closed.empty()) {
      // A member's goodbye and its connection's close can both arrive after the messages
      // were read above: read again before judging the close, or a member that said
      // goodbye would be taken for a dead one.
      TakeMessages(silent, &frames, closed);
      for (int fd : closed) OnDisconnect(fd);
    }
    silent.Tick([this](int fd) { return IsMemberConnection(fd); });
    if (!conflict_.empty()) {
      if (conflict_at == Clock::time_point()) conflict_at = Clock::now();
      // Refusals are out (an abandoned rendezvous lingers less: a stop is waiting).
      if (Clock::now() - conflict_at > std::chrono::seconds(abandoning ? 1 : 2)) break;
      continue;
    }
    if (ready_) CheckLiveness();
    if (ready_) {
      int finished = 0;  // a lost worker is marked done too: count it once
      for (const auto& w : workers_) finished += w.second.done ? 1 : 0;
      if (finished >= num_workers_) break;
    } else if (Clock::now() - last_progress > std::chrono::seconds(10)) {
      TFPS_LOG(Info) << "still waiting for " << Waiting() << " to register";
      last_progress = Clock::now();
    }
  }
  if (stop) {
    int finished = 0;  // a lost worker is marked done too: count it once
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
  if (!failure_.empty()) {
    TFPS_LOG(Error) << "the job failed: " << failure_ << "; exiting with 1";
    return 1;
  }
  TFPS_LOG(Info) << "every worker said goodbye; exiting";
  return 0;
}

void Scheduler::TakeMessages(SilentConnections& silent, std::vector<zmq::message_t>* frames,
                             const std::vector<int>& closed) {
  while (RecvFrames(router_, frames)) {
    silent.OnMessage(*frames);
    const int fd = frames->size() > 1 ? SilentConnections::SourceFd((*frames)[1]) : -1;
    try {
      OnMessage(*frames);
    } catch (const std::exception& e) {  // no exception leaves the scheduler's thread
      TFPS_LOG(Error) << "dropped a message that could not be handled: " << e.what();
    }
    // A connection whose close was read already (the monitor forgot it) stays forgotten:
    // its descriptor may be a new connection's by now.
    if (fd >= 0 && IsMemberConnection(fd) &&
        std::find(closed.begin(), closed.end(), fd) == closed.end()) {
      silent.OnMember(fd);
    }
  }
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
  } else if (IsPong(head.header)) {
    liveness_.OnPong(identity, Liveness::Clock::now());
  } else if (type == MsgType::kBye) {
    liveness_.Forget(identity);
    for (auto& w : workers_) {
      if (w.second.identity == identity) w.second.done = true;
    }
    for (Member& m : servers_) {
      if (m.identity == identity) m.done = true;
    }
  } else if (type == MsgType::kMemberNotice) {
    std::vector<zmq::message_t> notice;
    for (size_t i = 1; i < frames.size(); ++i) notice.push_back(std::move(frames[i]));
    Code code = Code::kOk;
    NoticeAbout unused;  // a member speaks about itself
    std::string text;
    if (ReadNotice(notice, &code, &unused, &text)) OnNotice(identity, code, text);
  } else if (limiter_.Allow(identity, &suppressed)) {
    TFPS_LOG(Warning) << "dropped an unexpected message of type " << head.header.type
                      << " from '" << EscapeForLog(identity) << "'" << SuppressedNote(suppressed);
  }
}

void Scheduler::CountMembership(int change) {
  metrics::membership_changes.Add();
  if (change > 0) metrics::scheduler_registrations.Add();
  if (change < 0) metrics::scheduler_departures.Add();
  metrics::scheduler_members.Add(change);
}

void Scheduler::OnRegister(const std::string& identity, zmq::message_t& payload, int fd) {
  if (!conflict_.empty()) {
    Refuse(identity, Code::kInvalidArgument, conflict_);
    return;
  }
  if (ready_) {
    Refuse(identity, Code::kFailedPrecondition,
           "the cluster is already complete; a late or restarted process cannot join" +
               (failure_.empty() ? std::string()
                                 : " (the job failed: " + failure_ + "; restart the whole job)"));
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
  m.more_ports = request.more_ports;
  if (request.role == Role::kServer) {
    if (static_cast<int>(servers_.size()) >= num_servers_) {
      Refuse(identity, Code::kInvalidArgument,
             "already have all " + std::to_string(num_servers_) + " servers (--num-servers)");
      return;
    }
    servers_.push_back(m);
    std::string more;
    for (int port : m.more_ports) more += "," + std::to_string(port);
    TFPS_LOG(Info) << "server " << servers_.size() - 1 << " registered from " << m.host << ":"
                   << m.port << more;
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
  CountMembership(+1);
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

// A stop (SIGTERM, SIGINT) before the cluster is complete: the registrants would otherwise
// wait TFPS_TIMEOUT for a cluster that never completes (tfps-run --elastic stops the
// scheduler of an epoch whose member died during its rendezvous, and the others go to the
// next epoch). Every registrant is told now, and later ones are refused for 1 s (one that
// read the epoch just before the driver replaced it); then Run returns kStoppedMidJob as
// for any stop. With nobody registered it returns at once.
void Scheduler::AbandonRendezvous() {
  conflict_ = "the scheduler was stopped before the cluster was complete (still waiting for " +
              Waiting() + "); this rendezvous is abandoned";
  Header h;
  h.type = static_cast<uint16_t>(MsgType::kError);
  h.status = static_cast<uint32_t>(Code::kUnavailable);
  size_t told = 0;
  for (const auto& w : workers_) told += SendText(router_, w.second.identity, h, conflict_).ok();
  for (const Member& s : servers_) told += SendText(router_, s.identity, h, conflict_).ok();
  TFPS_LOG(Warning) << conflict_ << "; told the " << told << " registered member(s)";
}

void Scheduler::AnnounceCluster() {
  ClusterView view;
  view.consistency = consistency_;
  bool more_ports = false;
  for (const Member& s : servers_) {
    view.servers.push_back(s.host + ":" + std::to_string(s.port));
    std::vector<int> ports = {s.port};
    ports.insert(ports.end(), s.more_ports.begin(), s.more_ports.end());
    view.server_ports.push_back(ports);
    more_ports = more_ports || !s.more_ports.empty();
  }
  if (!more_ports) view.server_ports.clear();  // one port each: the view as before
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
  const auto now = Liveness::Clock::now();
  for (const Member& s : servers_) liveness_.Watch(s.identity, now);
  for (const auto& w : workers_) liveness_.Watch(w.second.identity, now);
  std::string servers;
  for (const std::string& s : view.servers) servers += (servers.empty() ? "" : ",") + s;
  TFPS_LOG(Info) << "cluster complete: " << num_servers_ << " server(s) [" << servers << "], "
                 << num_workers_ << " worker(s), consistency " << ConsistencyName(consistency_);
}
std::string Scheduler::NameOf(const std::string& identity) const {
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (servers_[i].identity == identity) {
      return "server " + std::to_string(i) + " (" + servers_[i].host + ":" +
             std::to_string(servers_[i].port) + ")";
    }
  }
  for (const auto& w : workers_) {
    if (w.second.identity == identity) {
      return "worker " + std::to_string(w.first) + " (" + w.second.host + ")";
    }
  }
  return "";
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

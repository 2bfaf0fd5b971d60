// The links to the servers (loop.h): the join (rendezvous, hellos), the scheduler's notices
// and pings, a server's death, the goodbyes, and the shared-memory send path to a server on
// this host (TFPS_SHM_SERVER).
#include <dirent.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <thread>
#include <unordered_map>

#include "tf_ps_ops/cc/cluster/notice.h"
#include "tf_ps_ops/cc/cluster/rendezvous.h"
#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/common/metrics.h"
#include "tf_ps_ops/cc/common/stall.h"
#include "tf_ps_ops/cc/engine/loop.h"
#include "tf_ps_ops/cc/engine/stop_signal.h"
#include "tf_ps_ops/cc/transport/connection_limits.h"

namespace tfps {

using Clock = std::chrono::steady_clock;

Status Engine::Loop::Connect(const EngineOptions& options, ClusterView* view) {
  TFPS_RETURN_IF_ERROR(codec_.Init(config_));  // a bad TFPS_COMPRESSION fails before rendezvous
  RaiseDescriptorLimit();  // as every role does (connection_limits.h)
  const std::string scheduler = TcpAddress(options.scheduler_host, options.scheduler_port);
  scheduler_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
  SetCommonOptions(*scheduler_, config_);
  ConnectTcp(*scheduler_, scheduler);
  int peer_port = 0;
  TFPS_RETURN_IF_ERROR(mesh_.Bind(&peer_port));
  RegisterRequest request;
  request.role = Role::kWorker;
  request.rank = rank_;
  request.size = options.size;
  request.port = peer_port;
  request.consistency = config_.consistency;  // the scheduler checks every worker agrees
  TFPS_RETURN_IF_ERROR(
      RegisterWithScheduler(*scheduler_, scheduler, request, config_.timeout_s, view));
  Status joined = JoinClusterOnLoop(options, view);
  // The others learn why now, not after TFPS_TIMEOUT (unless the failure came from them).
  if (!joined.ok() && job_failed_.ok()) (void)SendNotice(*scheduler_, joined);
  return joined;
}

namespace {

// Descriptors this process has open now (0 when /proc/self/fd cannot be read).
uint64_t OpenDescriptors() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  uint64_t n = 0;
  while (readdir(dir) != nullptr) ++n;
  closedir(dir);
  return n > 3 ? n - 3 : 0;  // ".", ".." and the directory's own descriptor
}

// Every worker holds 5 descriptors per peer (its DEALER's connection and mailbox, that
// socket's monitor pair, and the peer's connection accepted by our ROUTER) and up to 8 per
// server. Out of descriptors, ZeroMQ fails a connect, or drops an accept without a word:
// the peer's allgather parts never arrive and every worker waits TFPS_TIMEOUT. Refuse at
// the rendezvous instead, naming the limit (docs/scale.md has the budget).
Status CheckDescriptorBudget(int rank, size_t workers, size_t servers) {
  const uint64_t limit = RaiseDescriptorLimit();
  const uint64_t open = OpenDescriptors();
  if (limit == 0 || open == 0) return Status::Ok();  // unknown: nothing to check against
  const uint64_t need = open + 5 * (workers - 1) + 8 * servers + 64;
  if (need <= limit) return Status::Ok();
  return ResourceExhausted(
      "worker " + std::to_string(rank) + " needs about " + std::to_string(need) +
      " file descriptors (" + std::to_string(open) + " open, 5 for each of its " +
      std::to_string(workers - 1) + " peers, 8 for each of " + std::to_string(servers) +
      " servers, 64 to spare) but RLIMIT_NOFILE allows " + std::to_string(limit) +
      " (its soft limit was raised to the hard one): raise the hard limit to at least " +
      std::to_string(need) + " (ulimit -Hn, LimitNOFILE= of a systemd unit, docker --ulimit "
      "nofile=...) or run fewer workers (docs/scale.md)");
}

}  // namespace

Status Engine::Loop::JoinClusterOnLoop(const EngineOptions& options, ClusterView* view) {
  TFPS_RETURN_IF_ERROR(
      CheckDescriptorBudget(rank_, view->worker_peers.size(), view->servers.size()));
  TFPS_RETURN_IF_ERROR(mesh_.Connect(view->worker_peers));
  timeline_.Open(config_.timeline, rank_);
  if (options.num_servers > 0 && static_cast<int>(view->servers.size()) != options.num_servers) {
    return InvalidArgument("expected " + std::to_string(options.num_servers) +
                           " servers (TFPS_NUM_SERVERS/DMLC_NUM_SERVER) but the scheduler knows " +
                           std::to_string(view->servers.size()));
  }
  own_host_ = view->worker_hosts[rank_];
  servers_.resize(view->servers.size());
  for (size_t i = 0; i < view->servers.size(); ++i) {
    servers_[i].address = ServerAddressFor(*view, static_cast<int>(i), rank_);  // spread
    TFPS_RETURN_IF_ERROR(OpenServerOnLoop(i));
  }
  batches_.resize(servers_.size());
  return AwaitHellosOnLoop();
}

Status Engine::Loop::OpenServerOnLoop(size_t i) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  Server& s = servers_[i];
  s.socket = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
  SetCommonOptions(*s.socket, config_);
  PinToIoThread(*s.socket, static_cast<int>(i), config_);
  s.socket->set(zmq::sockopt::routing_id, "w" + std::to_string(rank_));
  s.monitor = std::make_unique<Monitor>(context_, *s.socket, "server-" + std::to_string(i),
                                        ZMQ_EVENT_DISCONNECTED);
  ConnectTcp(*s.socket, TcpAddressOf(s.address));
  Head hello;
  hello.header.type = static_cast<uint16_t>(MsgType::kHello);
  hello.header.sender = rank_;
  const bool colocated = s.address.substr(0, s.address.rfind(':')) == own_host_;
  const std::string ask = config_.shm_server && colocated ? "shm" : "";
  return SendMessage(*s.socket, "", hello, zmq::message_t(ask.data(), ask.size()));
}

// Every server must answer the hello (and so accept our protocol version) in time.
Status Engine::Loop::AwaitHellosOnLoop() {
  std::vector<bool> answered(servers_.size(), false);
  size_t num_answered = 0;
  const auto deadline = Clock::now() + std::chrono::duration<double>(config_.timeout_s);
  std::vector<zmq::message_t> frames;
  while (num_answered < servers_.size()) {
    if (Clock::now() > deadline) {
      for (size_t i = 0; i < servers_.size(); ++i) {
        if (!answered[i]) return DeadlineExceeded(WhyNoHelloOnLoop(i));
      }
    }
    std::vector<zmq::pollitem_t> items;
    for (Server& s : servers_) items.push_back({s.socket->handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({scheduler_->handle(), 0, ZMQ_POLLIN, 0});
    Poll(items.data(), items.size(), 100);
    TFPS_RETURN_IF_ERROR(ReadNoticesOnLoop());
    for (size_t i = 0; i < servers_.size(); ++i) {
      if (!RecvFrames(*servers_[i].socket, &frames)) continue;
      bool now = answered[i];
      TFPS_RETURN_IF_ERROR(OnHelloReplyOnLoop(i, frames, &now));
      if (now && !answered[i]) {
        answered[i] = true;
        ++num_answered;
      }
    }
  }
  return Status::Ok();
}

// A ROUTER ignores a second connection under a routing identity it already has: when a
// stray or hostile client took "w<rank>" first, our hello is dropped unread and the server
// looks unreachable. The probe's identity is no worker's, so a live server refuses it
// (and logs that): any answer shows the server serves other connections but not ours.
std::string Engine::Loop::WhyNoHelloOnLoop(size_t i) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const std::string waited =
      " within " + std::to_string(config_.timeout_s) + " s (TFPS_TIMEOUT)";
  const std::string identity = "w" + std::to_string(rank_);
  bool answers_others = false;
  try {
    zmq::socket_t probe(context_, zmq::socket_type::dealer);
    SetCommonOptions(probe, config_);
    probe.set(zmq::sockopt::routing_id, "probe-" + identity);
    probe.set(zmq::sockopt::linger, 0);
    ConnectTcp(probe, TcpAddressOf(servers_[i].address));
    Head hello;
    hello.header.type = static_cast<uint16_t>(MsgType::kHello);
    hello.header.sender = rank_;
    if (SendMessage(probe, "", hello, zmq::message_t()).ok()) {
      zmq::pollitem_t item{probe.handle(), 0, ZMQ_POLLIN, 0};
      const double wait_s = std::min(config_.timeout_s, 3.0);  // a live server answers in ms
      Poll(&item, 1, static_cast<int>(wait_s * 1000));
      std::vector<zmq::message_t> frames;
      answers_others = RecvFrames(probe, &frames);
    }
  } catch (const zmq::error_t& e) {
    TFPS_LOG(Debug) << "the probe of " << Describe(static_cast<int>(i)) << " failed: " << e.what();
  }
  if (!answers_others) {
    return Describe(static_cast<int>(i)) + " did not answer" + waited +
           ": is it reachable from this host?";
  }
  return Describe(static_cast<int>(i)) + " answers other connections but not this worker's "
         "hello" + waited + ": another connection already holds this worker's identity '" +
         identity + "' on it (a second process started as rank " + std::to_string(rank_) +
         ", or a stray client of its port), and ZeroMQ ignores a later connection under an "
         "identity that is taken; stop that process, then restart the job";
}

Status Engine::Loop::OnHelloReplyOnLoop(size_t i, std::vector<zmq::message_t>& frames,
                                        bool* answered) {
  Head head;
  const size_t payload = frames.size() > 1 ? frames[1].size() : 0;
  Status st = DecodeHead(frames[0].data(), frames[0].size(), payload, &head);
  if (st.ok() && head.header.type == static_cast<uint16_t>(MsgType::kError)) {
    // The text frame is optional, as in OnReplyOnLoop.
    st = Status(static_cast<Code>(head.header.status),
                frames.size() > 1 ? frames[1].to_string() : "(no reason given)");
  }
  if (!st.ok()) return st.WithPrefix(Describe(static_cast<int>(i)) + " refused us: ");
  if (head.header.type != static_cast<uint16_t>(MsgType::kHelloReply) || *answered) {
    return Status::Ok();
  }
  *answered = true;
  const std::string offer = frames.size() > 1 ? frames[1].to_string() : "";
  std::string why;
  if (!AcceptShmOffer(offer, &servers_[i].shm_token, &why) && !why.empty()) {
    TFPS_LOG(Info) << "TFPS_SHM_SERVER: " << Describe(static_cast<int>(i))
                   << " is on this host but " << why << "; its traffic takes the socket";
  }
  return Status::Ok();
}

namespace {

// A server's stall warning names tensors by key ("tensor 0x0123456789abcdef", stall.h):
// each one this worker has called goes by its name instead.
std::string NameTensors(std::string text, const std::unordered_map<std::string, uint64_t>& called) {
  static const std::string kPrefix = "tensor 0x";
  constexpr size_t kHexDigits = 16;
  if (text.find(kPrefix) == std::string::npos) return text;
  std::unordered_map<std::string, const std::string*> by_key;
  for (const auto& kv : called) by_key[TensorOfKey(KeyOfName(kv.first))] = &kv.first;
  for (size_t at = text.find(kPrefix); at != std::string::npos; at = text.find(kPrefix, at + 1)) {
    auto it = by_key.find(text.substr(at, kPrefix.size() + kHexDigits));
    if (it == by_key.end()) continue;
    text.replace(at, it->first.size(), "tensor '" + *it->second + "'");
  }
  return text;
}

}  // namespace

Status Engine::Loop::ReadNoticesOnLoop() {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  // Pings answered here: this thread lives (notice.h).
  ReadNotices(
      *scheduler_, true,
      [this](Code code, const NoticeAbout& about, const std::string& text) {
        // A notice about one member (not the job as a whole): a member left or was lost.
        if (about.index >= 0) metrics::membership_changes.Add();
        if (job_failed_.ok()) FailJobOnLoop(Status(code, JobFailedMessage(text)));
        return true;
      },
      [this](const std::string& text) {
        if (text.find("stall warning: ") != std::string::npos) metrics::stalls.Add();
        return NameTensors(text, steps_);
      });
  return job_failed_;
}

void Engine::Loop::FailJobOnLoop(const Status& why) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  job_failed_ = why;
  TFPS_LOG(Error) << job_failed_.message();
  while (!ops_.empty()) FinishOnLoop(ops_.begin()->first, job_failed_);
  mesh_.FailAllOnLoop(job_failed_);
  std::vector<std::function<void(const Status&)>> listeners;
  {
    std::lock_guard<std::mutex> lock(failed_mu_);
    failed_seen_ = job_failed_;
    listeners.swap(failed_listeners_);
  }
  for (auto& listener : listeners) listener(job_failed_);
}

void Engine::Loop::StoppedBySignalOnLoop() {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const int sig = CaughtStopSignal();
  const std::string why = "stopped by " + std::string(sig == SIGTERM ? "SIGTERM" : "a signal") +
                          " (signal " + std::to_string(sig) + ")";
  TFPS_LOG(Warning) << why << "; telling the others, then exiting by that signal";
  (void)SendNotice(*scheduler_, Aborted(why));
  // The notice leaves on ZeroMQ's I/O thread: give it a moment before the signal ends us.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ReraiseStopSignal();
}

void Engine::Loop::ServerDiedOnLoop(int server, const std::string& why) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  if (!servers_[server].dead.empty()) return;
  servers_[server].dead = why;
  TFPS_LOG(Error) << Describe(server) << " " << why;
  std::vector<uint64_t> victims;
  for (const auto& kv : ops_) {
    const Op& op = kv.second;
    for (size_t i = 0; i < op.parts.size(); ++i) {
      if (op.parts[i].server == server && op.part_state[i] != kDone) {
        victims.push_back(kv.first);
        break;
      }
    }
  }
  for (uint64_t id : victims) FinishOnLoop(id, Unavailable(Describe(server) + " " + why));
  if (static_cast<size_t>(server) < batches_.size()) batches_[server].Clear();  // its cycle
}

void Engine::Loop::SayGoodbyeOnLoop() {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  Head bye;
  bye.header.type = static_cast<uint16_t>(MsgType::kBye);
  bye.header.sender = rank_;
  for (Server& s : servers_) {
    if (s.dead.empty()) (void)SendMessage(*s.socket, "", bye, zmq::message_t());
  }
  (void)SendMessage(*scheduler_, "", bye, zmq::message_t());
  // Closing the sockets flushes the goodbyes (linger), then the context can end.
  for (Server& s : servers_) {
    s.monitor.reset();
    // A server known dead takes nothing more: no linger, which would hold this close.
    if (!s.dead.empty()) s.socket->set(zmq::sockopt::linger, 0);
    s.socket->close();
    for (auto& kv : s.shm) kv.second->Unlink();  // a server that never mapped it
    s.shm.clear();
  }
  scheduler_->close();
  mesh_.CloseOnLoop();
}

// Only a plain dense push of this worker's data, not fused, goes through the segment: the
// head alone travels, batched with the other heads and small pushes for that server.
ShmSegment* Engine::Loop::ShmRouteOnLoop(const Op& op, uint32_t index) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const Server& s = servers_[op.parts[index].server];
  if (op.request.join || !op.row_begin.empty() || op.codec.id != CodecId::kNone ||
      s.shm_token.empty() || s.shm_busy.count({op.key, index}) != 0) {
    return nullptr;
  }
  return ShmOrSocketOnLoop(op.parts[index].server, op, index);
}

ShmSegment* Engine::Loop::ShmOrSocketOnLoop(int server, const Op& op, uint32_t index) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  Server& s = servers_[server];
  if (s.shm_refused.count({op.key, index}) != 0) return nullptr;
  Status st;
  ShmSegment* segment = ShmOfOnLoop(server, op, index, &st);
  if (segment != nullptr) return segment;
  if (s.shm_refused.empty()) {
    TFPS_LOG(Warning) << "TFPS_SHM_SERVER: partition " << index << " of "
                      << "tensor " << op.request.name << " goes to " << Describe(server)
                      << " over the socket: " << st.message()
                      << " (logged once per server; such partitions stay on the socket)";
  }
  s.shm_refused.insert({op.key, index});
  return nullptr;
}

ShmSegment* Engine::Loop::ShmOfOnLoop(int server, const Op& op, uint32_t index,
                                      Status* status) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  Server& s = servers_[server];
  const uint64_t bytes = op.parts[index].count * DTypeSize(op.request.dtype);
  std::unique_ptr<ShmSegment>& segment = s.shm[{op.key, index}];
  if (segment && segment->header()->bytes != bytes) segment.reset();  // cannot happen
  if (!segment) {
    char key_hex[17];
    std::snprintf(key_hex, sizeof(key_hex), "%016llx", static_cast<unsigned long long>(op.key));
    ShmSegment* created = nullptr;
    *status = ShmSegment::Create("/tfps-p" + s.shm_token + "-" + key_hex + "-" +
                                     std::to_string(index),
                                 bytes, static_cast<uint32_t>(op.request.dtype), -1, &created,
                                 "the colocated server", "TFPS_SHM_SERVER=0");
    if (!status->ok()) {
      s.shm.erase({op.key, index});
      return nullptr;
    }
    segment.reset(created);
  }
  return segment.get();
}

bool Engine::Loop::ReleaseShmOnLoop(int server, const Header& h) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  if (h.type == static_cast<uint16_t>(MsgType::kAck)) return false;  // not answered yet
  Server& s = servers_[server];
  auto busy = s.shm_busy.find({h.key, h.partition});
  if (busy == s.shm_busy.end() || busy->second != h.step) return false;
  s.shm_busy.erase(busy);
  // The server has opened the segment (or refused it): no one needs the memfd now.
  auto segment = s.shm.find({h.key, h.partition});
  if (segment != s.shm.end()) segment->second->CloseFd();
  return true;
}

void Engine::Loop::ResendOverSocketOnLoop(int server, uint64_t op_id, Op& op, uint32_t index,
                                          const std::string& why) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  Server& s = servers_[server];
  if (s.shm_refused.empty()) {
    TFPS_LOG(Warning) << "TFPS_SHM_SERVER: partition " << index << " of tensor "
                      << op.request.name << " goes to " << Describe(server)
                      << " over the socket: " << why
                      << " (logged once per server; such partitions stay on the socket)";
  }
  s.shm_refused.insert({op.key, index});
  auto segment = s.shm.find({op.key, index});
  if (segment != s.shm.end()) {
    segment->second->Unlink();
    s.shm.erase(segment);
  }
  Status st = SendPartOnLoop(op_id, op, index);  // now over the socket: nothing was counted
  if (st.ok() && ops_.count(op_id) != 0) FlushOnLoop(op.parts[index].server);
  if (!st.ok() && ops_.count(op_id) != 0) FinishOnLoop(op_id, st);
}

}  // namespace tfps

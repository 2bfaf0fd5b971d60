#include "ps_server/shard_server.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "ps_server/exit_codes.h"
#include "ps_server/thread_shard.h"
#include "tf_ps_ops/cc/cluster/notice.h"
#include "tf_ps_ops/cc/cluster/rendezvous.h"
#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/common/metrics.h"
#include "tf_ps_ops/cc/transport/connection_limits.h"
#include "tf_ps_ops/cc/transport/zmq_util.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

namespace {

enum WorkerState { kUnseen = 0, kConnected = 1, kDone = 2, kGone = 3 };

// Checkpoint writes that fail in a row before the server gives up (the job fails naming
// the reason); fewer reach the workers as warnings.
constexpr int kCheckpointFailuresFatal = 3;

// The rank of a worker's routing id ("w<rank>", WorkerIdentity), or -1.
int RankOfIdentity(const std::string& identity) {
  if (identity.size() < 2 || identity.size() > 10 || identity[0] != 'w') return -1;
  int rank = 0;
  for (size_t i = 1; i < identity.size(); ++i) {
    if (identity[i] < '0' || identity[i] > '9') return -1;
    rank = rank * 10 + (identity[i] - '0');
  }
  return rank;
}

// A reply sent from its buffer in place; ZeroMQ holds a reference until the bytes are out.
zmq::message_t MessageOf(const Buffer& buffer) {
  return ZeroCopyMessage(buffer.data(), buffer.size(), buffer.owner());
}

}  // namespace

ShardServer::ShardServer(int num_workers, int num_servers, const Config& config)
    : num_workers_(num_workers),
      num_servers_(num_servers),
      config_(config),
      context_(config.io_threads),
      router_(context_, zmq::socket_type::router),
      scheduler_(context_, zmq::socket_type::dealer),
      budget_(static_cast<uint64_t>(config.server_push_bytes), num_workers),
      worker_state_(num_workers, kUnseen),
      shm_(config.shm_server) {
  SetCommonOptions(router_, config_);
  SetCommonOptions(scheduler_, config_);
  router_.set(zmq::sockopt::router_mandatory, 1);
  zap_ = ZapHandler::StartIfKeyed(context_, config_);  // before the socket binds
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  metrics::server_push_bytes_limit.Set(static_cast<int64_t>(budget_.limit()));
}

ShardServer::~ShardServer() {
  stopping_ = true;
  for (auto& inbox : inboxes_) inbox->cv.notify_all();
  for (auto& t : threads_) t.join();
  if (wake_fd_ >= 0) close(wake_fd_);
}

Status ShardServer::Start(const std::string& scheduler_host, int scheduler_port, int port,
                          const std::string& host) {
  TFPS_RETURN_IF_ERROR(CheckBindAllowed(config_, "this server"));
  TFPS_RETURN_IF_ERROR(BindPorts(port));
  // Files there now were written by an earlier job: this job's servers write none before
  // every server has registered. A directory the server cannot use fails it only after it
  // has registered, as a corrupt file does: the others learn why at once, instead of
  // waiting TFPS_TIMEOUT for a server that never came (and the scheduler forever).
  std::vector<std::pair<int, int>> existing;
  Status usable;
  if (!config_.checkpoint_dir.empty()) {
    usable = EnsureCheckpointDir(config_.checkpoint_dir);
    if (usable.ok()) usable = ListCheckpoints(config_.checkpoint_dir, &existing);
  }
  const std::string scheduler = TcpAddress(scheduler_host, scheduler_port);
  ConnectTcp(scheduler_, scheduler);
  RegisterRequest request;
  request.role = Role::kServer;
  request.port = ports_[0];
  request.more_ports.assign(ports_.begin() + 1, ports_.end());
  request.host = StripBrackets(host);  // the view's "host:port" holds IPv6 bare
  ClusterView view;
  TFPS_RETURN_IF_ERROR(
      RegisterWithScheduler(scheduler_, scheduler, request, config_.timeout_s, &view));
  server_id_ = view.server_id;
  worker_hosts_ = view.worker_hosts;  // which local sums each worker may push
  consistency_ = view.consistency;  // the workers' agreed model
  SetLogRole("server " + std::to_string(server_id_));
  SetMetricsRole(kServerRole, "server", server_id_);
  Status restored = usable.ok() ? RestoreCheckpoint(existing) : usable;
  if (!restored.ok()) {  // the others learn why now, not after TFPS_TIMEOUT
    (void)SendNotice(scheduler_, restored);
    return restored;
  }
  std::string more;  // the ports of I/O threads 2 and up
  for (size_t i = 1; i < ports_.size(); ++i) {
    more += (i > 1 ? "," : "") + std::to_string(ports_[i]);
  }
  if (!more.empty()) more = " (and " + more + ": one port per I/O thread)";
  TFPS_LOG(Info) << "serving on port " << ports_[0] << more << " with " << config_.server_threads
                 << " summation thread(s) for " << num_workers_ << " worker(s), consistency "
                 << ConsistencyName(consistency_);
  for (int i = 0; i < config_.server_threads; ++i) {
    inboxes_.push_back(std::make_unique<Inbox>());
  }
  watch_ = std::make_unique<ThreadWatch>(config_.server_threads);
  for (int i = 0; i < config_.server_threads; ++i) {
    threads_.emplace_back([this, i] { SummationLoop(i); });
  }
  return Status::Ok();
}

// A listener's accepted connections run on the listener's I/O thread (the ZMQ_AFFINITY it
// was bound with), so behind one port every worker's connection would share one thread,
// whose CPU (CURVE's above all) then bounds the server. Each port is another endpoint of
// the one ROUTER: routing ids, the monitor (SilentConnections' caps), high-water marks,
// handshake timeout, heartbeats, ZMQ_MAXMSGSIZE and CURVE are the socket's and hold on
// every port. A fixed --port keeps that one port alone (the one a firewall opens).
Status ShardServer::BindPorts(int port) {
  const int threads = std::max(1, std::min(config_.io_threads, kMaxIoThreads));
  const int listeners = port == 0 ? threads : 1;
  for (int i = 0; i < listeners; ++i) {
    PinToIoThread(router_, i, config_);
    try {
      BindTcp(router_, BindEndpoint(config_, port, "this server"));
    } catch (const zmq::error_t& e) {
      return Unavailable("server cannot bind port " + std::to_string(port) + " (listener " +
                         std::to_string(i + 1) + " of " + std::to_string(listeners) +
                         ", one per TFPS_IO_THREADS): " + e.what());
    }
    ports_.push_back(BoundPort(router_));
  }
  return Status::Ok();
}

ShardInfo ShardServer::ShardInfoOf(int thread) const {
  ShardInfo info;
  info.server_id = server_id_;
  info.num_servers = num_servers_;
  info.thread = thread;
  info.num_threads = config_.server_threads;
  return info;
}

Status ShardServer::RestoreCheckpoint(const std::vector<std::pair<int, int>>& existing) {
  const std::string& dir = config_.checkpoint_dir;
  if (dir.empty()) return Status::Ok();
  TFPS_RETURN_IF_ERROR(LoadShard(dir, existing, ShardInfoOf(-1), &restored_));
  if (restored_.empty()) {  // a fresh start: a file per thread, so a restart finds them all
    for (int t = 0; t < config_.server_threads; ++t) {
      TFPS_RETURN_IF_ERROR(
          WriteCheckpoint(dir + "/" + CheckpointFileName(server_id_, t), ShardInfoOf(t), {}));
    }
    TFPS_LOG(Info) << "checkpoints go to " << dir << " (TFPS_CHECKPOINT_EVERY="
                   << config_.checkpoint_every << ")";
    return Status::Ok();
  }
  size_t count = 0;
  uint64_t low = UINT64_MAX, high = 0;
  for (const ShardParams& shard : restored_) {
    for (const auto& entry : shard) {
      ++count;
      if (entry.second.updates == 0) continue;
      low = std::min(low, entry.second.updates);
      high = std::max(high, entry.second.updates);
    }
  }
  TFPS_LOG(Info) << "restored " << count << " parameter partition(s) from " << dir << "/"
                 << "shard-" << server_id_ << "-*.ckpt, updated " << (high ? low : 0)
                 << (low < high ? ".." + std::to_string(high) : "") << " time(s)";
  if (low < high) {
    TFPS_LOG(Warning) << "the restored parameters were updated different numbers of times ("
                      << low << ".." << high << "): a thread's checkpoint is older than another's "
                      << "(the server stopped between them), or some are updated less often";
  }
  return Status::Ok();
}

void ShardServer::SummationLoop(int index) {
  const std::string trace =
      config_.consistency_trace.empty()
          ? ""
          : config_.consistency_trace + "/reads-" + std::to_string(server_id_) + "-" +
                std::to_string(index) + ".txt";
  KeyStore store(num_workers_, server_id_, config_.stall, consistency_, trace);
  if (!restored_.empty()) store.RestoreParams(std::move(restored_[index]));
  store.SetWorkerHosts(worker_hosts_);
  const bool checkpoints = !config_.checkpoint_dir.empty();
  Inbox& inbox = *inboxes_[index];
  std::vector<Outgoing> replies;
  std::vector<std::string> stall_warnings;
  ShmAnswers shm_answers;  // this thread's shared-memory pushes, answered here
  while (!stopping_) {
    std::deque<Work> batch;
    watch_->Beat(index, ThreadWatch::kWaiting);
    {
      std::unique_lock<std::mutex> lock(inbox.mu);
      inbox.cv.wait_for(lock, std::chrono::milliseconds(250),
                        [&] { return stopping_ || !inbox.queue.empty(); });
      batch.swap(inbox.queue);
    }
    metrics::server_summation_queue.Add(-static_cast<int64_t>(batch.size()));
    for (Work& w : batch) {
      watch_->Beat(index, ThreadWatch::kPush);
      SummationWorkOnSummationThread(store, w, &replies, &shm_answers);
    }
    watch_->Beat(index, ThreadWatch::kTick);
    try {
      store.OnTick(KeyStore::Clock::now(), &replies, &stall_warnings);
      // Logged here and told to every member (their engines name the tensors).
      for (const std::string& w : stall_warnings) {
        metrics::stalls.Add();
        TFPS_LOG(Warning) << w;
        PostNotice(Status::Ok(), w);
      }
      stall_warnings.clear();
    } catch (const std::exception& e) {  // e.g. bad_alloc: log, keep serving
      TFPS_LOG(Error) << "summation thread " << index << ": " << e.what();
    }
    watch_->Beat(index, ThreadWatch::kReplies);
    shm_answers.Fill(&replies);  // the sum into colocated workers' memory, on this thread
    PostReplies(&replies);
    if (checkpoints && store.CheckpointDue(config_.checkpoint_every)) {
      watch_->Beat(index, ThreadWatch::kCheckpoint);
      CheckpointOnSummationThread(index, store);
    }
  }
  watch_->Beat(index, ThreadWatch::kExited);
}

// No exception leaves a summation thread: the push that raised one (an allocation the
// size checks let through, say) fails with an error reply to its sender, and the thread
// serves on. Its round may stay incomplete; the others' pushes then time out naming it.
void ShardServer::SummationWorkOnSummationThread(KeyStore& store, Work& w,
                                                 std::vector<Outgoing>* replies,
                                                 ShmAnswers* shm_answers) {
  // The replies this work makes count against their workers (push_budget.h) before the
  // push that made them stops counting: `pushed` keeps its payload until then.
  const size_t first_reply = replies->size();
  const Buffer pushed = w.data;
  try {
    if (w.kind == Work::kPush && w.shm) {
      // Summed in place (sum_rounds.cc never writes a borrowed buffer); the stale
      // consistency models keep pushes beyond the answer, so they get a copy.
      Buffer payload = consistency_.bsp() ? std::move(w.shm_payload)
                                          : Buffer::CopyOf(w.shm_payload.data(),
                                                           w.shm_payload.size());
      shm_answers->Expect(WorkerIdentity(w.head.header.sender), w.head.header, std::move(w.shm));
      store.OnPush(w.head, std::move(payload), replies, w.received_us);
    } else if (w.kind == Work::kPush) {
      store.OnPush(w.head, std::move(w.data), replies, w.received_us);
    } else if (w.kind == Work::kJoin) {
      store.OnJoin(w.head, w.answer, replies);
    } else {
      shm_answers->Forget(WorkerIdentity(w.rank));
      store.OnWorkerLost(w.rank, w.why, replies);
    }
  } catch (const std::exception& e) {
    const Status s = Internal(std::string("the server could not handle this push: ") +
                              e.what());
    TFPS_LOG(Error) << s.message();
    if (w.kind == Work::kPush && w.head.header.sender >= 0) {
      replies->push_back(ErrorReply(w.head.header, w.head.header.sender, server_id_, s));
    }
  }
  for (size_t i = first_reply; i < replies->size(); ++i) {
    Outgoing& o = (*replies)[i];
    o.payload = budget_.HoldReply(RankOfIdentity(o.identity), std::move(o.payload));
  }
}

void ShardServer::CheckpointOnSummationThread(int index, KeyStore& store) {
  const auto start = KeyStore::Clock::now();
  const std::string path = config_.checkpoint_dir + "/" + CheckpointFileName(server_id_, index);
  Status s = WriteCheckpoint(path, ShardInfoOf(index), store.params(),
                             [this, index] { watch_->Beat(index, ThreadWatch::kCheckpoint); });
  store.MarkCheckpointed();  // a failed write is retried at the next due state, not at once
  if (!s.ok()) {
    const int failures = ++checkpoint_failures_;
    if (failures >= kCheckpointFailuresFatal) {
      PostNotice(FailedPrecondition(std::to_string(failures) + " checkpoint writes failed in a "
                                    "row, the last: " + s.message() +
                                    " (fix TFPS_CHECKPOINT_DIR and restart from the last "
                                    "checkpoint)"), "");
      return;
    }
    TFPS_LOG(Error) << s.message() << " (serving goes on; the previous checkpoint stays)";
    PostNotice(Status::Ok(), "checkpoint write failed (" + std::to_string(failures) + " of " +
                                 std::to_string(kCheckpointFailuresFatal) +
                                 " in a row before the job stops): " + s.message());
    return;
  }
  checkpoint_failures_ = 0;
  TFPS_LOG(Debug) << "wrote " << path << " (" << store.num_parameters()
                  << " parameter partitions) in "
                  << std::chrono::duration<double>(KeyStore::Clock::now() - start).count()
                  << " s";
}

void ShardServer::PostReplies(std::vector<Outgoing>* replies) {
  if (replies->empty()) return;
  {
    std::lock_guard<std::mutex> lock(outbox_mu_);
    for (Outgoing& o : *replies) outbox_.push_back(std::move(o));
  }
  replies->clear();
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void ShardServer::PostNotice(const Status& status, const std::string& warning) {
  {
    std::lock_guard<std::mutex> lock(outbox_mu_);
    notices_.emplace_back(status, warning);
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

bool ShardServer::ExchangeNoticesOnIoThread(std::string* why) {
  std::vector<std::pair<Status, std::string>> mine;
  {
    std::lock_guard<std::mutex> lock(outbox_mu_);
    mine.swap(notices_);
  }
  for (const auto& notice : mine) {
    (void)SendNotice(scheduler_, notice.first, notice.second);
    if (!notice.first.ok()) {
      *why = notice.first.message();
      return false;
    }
  }
  // The I/O thread lives (notice.h), and so do the summation threads (thread_watch.h).
  const bool alive = SummationThreadsAliveOnIoThread();
  return ReadNotices(scheduler_, alive, [&](Code, const NoticeAbout& about,
                                            const std::string& text) {
    if (about.role == Role::kWorker && about.index >= 0 && about.index < num_workers_) {
      // As a closed connection: its rounds fail naming it, serving goes on for the others
      // (also when it never connected here).
      if (worker_state_[about.index] != kDone && worker_state_[about.index] != kGone) {
        OnWorkerGoneOnIoThread(about.index, text);
      }
      return true;
    }
    *why = JobFailedMessage(text);  // no job goes on without one of its servers
    return false;
  });
}

bool ShardServer::SummationThreadsAliveOnIoThread() {
  if (!watch_ || config_.heartbeat_timeout_s <= 0) return true;
  double quiet = 0;
  std::string doing;
  const int stuck = watch_->Stuck(config_.heartbeat_timeout_s, &quiet, &doing);
  if (stuck < 0) {
    if (stuck_reported_ >= 0) {
      TFPS_LOG(Warning) << "summation thread " << stuck_reported_
                        << " progresses again; answering heartbeats again";
    }
    stuck_reported_ = -1;
    return true;
  }
  if (stuck != stuck_reported_) {
    stuck_reported_ = stuck;
    char seconds[32], window[32];
    std::snprintf(seconds, sizeof(seconds), "%.1f", quiet);
    std::snprintf(window, sizeof(window), "%g", config_.heartbeat_timeout_s);
    const std::string why =
        "summation thread " + std::to_string(stuck) + " of server " +
        std::to_string(server_id_) + " has made no progress for " + seconds +
        " s (TFPS_HEARTBEAT_TIMEOUT=" + window + " s) while " + doing + " (a blocked file or disk write, a deadlock?): this server "
        "no longer answers heartbeats and is named hung unless the thread goes on";
    TFPS_LOG(Error) << why;
    (void)SendNotice(scheduler_, Status::Ok(), why);
  }
  return false;
}

bool ShardServer::StopSummationThreadsOnIoThread() {
  stopping_ = true;
  for (auto& inbox : inboxes_) inbox->cv.notify_all();
  // Waits while the threads progress; one silent for TFPS_HEARTBEAT_TIMEOUT is stuck.
  while (watch_ && !watch_->AllExited()) {
    double quiet = 0;
    std::string doing;
    const int stuck = watch_->Stuck(config_.heartbeat_timeout_s, &quiet, &doing);
    if (stuck >= 0) {
      TFPS_LOG(Error) << "summation thread " << stuck << " is stuck (no progress for "
                      << quiet << " s while " << doing << "): exiting without it";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
  return true;
}

int ShardServer::Run(const std::atomic<bool>& stop) {
  Monitor monitor(context_, router_, "server",
                  SilentConnections::kEvents | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL);
  // "tcp://127.0.0.1:7000,7001": the caps count the connections of every port together.
  std::string where = router_.get(zmq::sockopt::last_endpoint);
  where.erase(where.rfind(':') + 1);
  for (size_t i = 0; i < ports_.size(); ++i) where += (i ? "," : "") + std::to_string(ports_[i]);
  SilentConnections silent(router_, "this server", SilentConnections::DefaultCap(), where);
  std::vector<zmq::message_t> frames;
  std::string failed;  // why the job cannot go on
  while (!stop) {
    zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                               {monitor.socket().handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, wake_fd_, ZMQ_POLLIN, 0},
                               {scheduler_.handle(), 0, ZMQ_POLLIN, 0}};
    Poll(items, 4, silent.PollTimeoutMs(200));
    if (items[2].revents & ZMQ_POLLIN) {
      uint64_t n;
      (void)!read(wake_fd_, &n, sizeof(n));
    }
    SendOutboxOnIoThread();
    metrics::server_push_bytes_held.Set(static_cast<int64_t>(budget_.held()));
    if (!ExchangeNoticesOnIoThread(&failed)) break;
    // Reads up to `limit` waiting messages and handles them. A connection in `closed`
    // (its close already read from the monitor, which forgot it) is not marked a member's
    // again: its descriptor may already be a new connection's.
    std::vector<int> closed;
    auto take = [&](size_t limit) {
      for (size_t i = 0; i < limit && RecvFrames(router_, &frames); ++i) {
        silent.OnMessage(frames);
        const int fd = frames.size() > 1 ? SilentConnections::SourceFd(frames[1]) : -1;
        const int rank = RankOfIdentity(frames[0].to_string());
        for (size_t f = 1; f < frames.size(); ++f) {
          metrics::server_bytes_received.Add(frames[f].size());
        }
        try {
          OnMessageOnIoThread(frames);
        } catch (const std::exception& e) {  // no exception leaves the I/O thread
          TFPS_LOG(Error) << "dropped a message that could not be handled: " << e.what();
        }
        // A worker's connection once its hello is taken (OnHelloOnIoThread).
        if (fd >= 0 && rank >= 0 && rank < num_workers_ && worker_state_[rank] == kConnected &&
            fd_of_rank_.count(rank) != 0 && fd_of_rank_[rank] == fd &&
            std::find(closed.begin(), closed.end(), fd) == closed.end()) {
          silent.OnMember(fd);
        }
      }
    };
    take(256);
    int event = 0, value = 0;
    std::string address;
    while (monitor.Read(&event, &value, &address)) {
      if (silent.OnEvent(event, value)) continue;
      if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
        uint64_t suppressed = 0;
        if (limiter_.Allow("\0handshake", &suppressed)) {
          // ZeroMQ's monitor names our own endpoint here, never the peer's (and the
          // connection is closed before the event can be read): say so, not as the peer.
          const std::string port = EscapeForLog(address.substr(address.rfind(':') + 1));
          TFPS_LOG(Warning) << "dropped a connection that a peer made to our port " << port
                            << " (" << EscapeForLog(address) << ") without speaking "
                            << "ZeroMQ/tf_ps_ops; ZeroMQ does not report the peer's address "
                            << "(`ss -tn 'sport = :" << port << "'` on this host lists who "
                            << "is connected)" << SuppressedNote(suppressed);
        }
        continue;
      }
      if (event == ZMQ_EVENT_DISCONNECTED) closed.push_back(value);
    }
    // A worker's goodbye and its connection's close can both arrive after the messages were
    // read above: read every waiting one before judging the close, or a worker that said
    // goodbye would be taken for a dead one.
    if (!closed.empty()) take(SIZE_MAX);
    for (int fd : closed) {
      for (const auto& rf : fd_of_rank_) {
        if (rf.second == fd && worker_state_[rf.first] == kConnected) {
          OnWorkerGoneOnIoThread(rf.first, "its connection closed, or fell silent for "
                                           "TFPS_HEARTBEAT_TIMEOUT, without a goodbye: it "
                                           "died or was stopped");
        }
      }
    }
    silent.Tick([this](int fd) {
      for (const auto& rf : fd_of_rank_) {
        if (rf.second == fd && worker_state_[rf.first] == kConnected) return true;
      }
      return false;
    });
    int finished = 0;
    for (int s : worker_state_) finished += (s == kDone || s == kGone) ? 1 : 0;
    if (finished == num_workers_) break;
  }
  // Let summation threads post their last replies, then flush them.
  const bool stopped = StopSummationThreadsOnIoThread();
  SendOutboxOnIoThread();
  if (!stopped) {  // a thread blocked in the kernel cannot be joined, nor this object freed
    TFPS_LOG(Error) << (failed.empty() ? std::string("the job ended") : failed)
                    << "; exiting with 1 without the stuck summation thread";
    std::fflush(stderr);  // not every stream: the stuck thread may hold one's lock
    std::_Exit(1);
  }
  if (!failed.empty()) {
    TFPS_LOG(Error) << failed << "; exiting with 1";
    return 1;
  }
  if (stop) {
    int finished = 0;
    for (int s : worker_state_) finished += (s == kDone || s == kGone) ? 1 : 0;
    if (finished == num_workers_) return 0;
    (void)SendNotice(scheduler_, Aborted("stopped by a signal (SIGTERM or SIGINT) before every "
                                         "worker finished"));
    return kStoppedMidJob;
  }
  int gone = 0;
  for (int s : worker_state_) gone += s == kGone ? 1 : 0;
  if (gone > 0) {
    TFPS_LOG(Error) << gone << " worker(s) vanished without shutting down; exiting with 1";
    return 1;
  }
  Head bye;  // so that the scheduler does not take our exit for a death
  bye.header.type = static_cast<uint16_t>(MsgType::kBye);
  (void)SendMessage(scheduler_, "", bye, zmq::message_t());
  TFPS_LOG(Info) << "every worker said goodbye; exiting";
  return 0;
}

void ShardServer::OnMessageOnIoThread(std::vector<zmq::message_t>& frames) {
  const std::string identity = frames[0].to_string();
  Head head;
  if (!DecodeOnIoThread(identity, frames, &head)) return;
  const Header& h = head.header;
  const int rank = h.sender;
  switch (static_cast<MsgType>(h.type)) {
    case MsgType::kHello:
      OnHelloOnIoThread(identity, rank, frames);
      return;
    case MsgType::kBye:
      worker_state_[rank] = kDone;
      metrics::membership_changes.Add();
      shm_.Forget(identity);
      return;
    case MsgType::kPushPullShm:
    case MsgType::kPushPull:
      OnPushOnIoThread(identity, std::move(head), frames);
      return;
    case MsgType::kBatch:
      OnBatchOnIoThread(identity, h, frames);
      return;
    case MsgType::kJoin:
      OnJoinOnIoThread(head);
      return;
    default:
      RejectOnIoThread(identity, "a message",
                       InvalidArgument("a server does not accept message type " +
                                       std::to_string(h.type)));
  }
}

bool ShardServer::DecodeOnIoThread(const std::string& identity,
                                   std::vector<zmq::message_t>& frames, Head* out) {
  const bool batch = frames.size() > 3 && IsBatchHead(frames[1].data(), frames[1].size());
  if (frames.size() < 2 || (frames.size() > 3 && !batch)) {
    uint64_t suppressed = 0;
    if (limiter_.Allow(identity, &suppressed)) {
      TFPS_LOG(Warning) << "dropped a message of " << frames.size() << " frames from '"
                        << EscapeForLog(identity) << "'" << SuppressedNote(suppressed);
    }
    return false;
  }
  const size_t payload_size = frames.size() == 3 ? frames[2].size() : 0;
  Head& head = *out;
  Status s = DecodeHead(frames[1].data(), frames[1].size(), payload_size, &head);
  if (s.ok()) s = CheckMessageSize(head.header, MaxMessageBytes());
  const Header& h = head.header;
  if (s.ok() && (h.sender < 0 || h.sender >= num_workers_ || identity != WorkerIdentity(h.sender))) {
    s = InvalidArgument("sender " + std::to_string(h.sender) + " does not match connection '" +
                        EscapeForLog(identity) + "' or is not a worker rank below " +
                        std::to_string(num_workers_));
  }
  if (!s.ok()) {
    RejectOnIoThread(identity, "a malformed message", s);
    return false;
  }
  return true;
}

void ShardServer::OnHelloOnIoThread(const std::string& identity, int rank,
                                    std::vector<zmq::message_t>& frames) {
  fd_of_rank_[rank] = frames[1].get(ZMQ_SRCFD);
  if (worker_state_[rank] == kUnseen) {
    worker_state_[rank] = kConnected;
    metrics::membership_changes.Add();
  }
  Head reply;
  reply.header.type = static_cast<uint16_t>(MsgType::kHelloReply);
  reply.header.sender = server_id_;
  const std::string offer = shm_.OnHello(identity, frames.size() == 3 ? frames[2].to_string()
                                                                      : std::string());
  (void)SendMessage(router_, identity, reply, zmq::message_t(offer.data(), offer.size()));
}

void ShardServer::OnPushOnIoThread(const std::string& identity, Head head,
                                   std::vector<zmq::message_t>& frames) {
  const bool shm = static_cast<MsgType>(head.header.type) == MsgType::kPushPullShm;
  std::vector<Work> works(1);
  works[0].kind = Work::kPush;
  works[0].head = std::move(head);
  works[0].received_us = WallMicros();
  if (shm) {
    if (!ReceiveShmOnIoThread(identity, &works[0])) return;
  } else if (frames.size() == 3) {
    works[0].payload = std::move(frames[2]);
  }
  AcceptPushesOnIoThread(identity, std::move(works));
}

// Every summation thread holds rounds the joined worker is due in.
void ShardServer::OnJoinOnIoThread(const Head& head) {
  for (size_t i = 0; i < inboxes_.size(); ++i) {
    Work w;
    w.kind = Work::kJoin;
    w.head = head;
    w.answer = i == 0;
    Inbox& inbox = *inboxes_[i];
    {
      std::lock_guard<std::mutex> lock(inbox.mu);
      inbox.queue.push_back(std::move(w));
    }
    metrics::server_summation_queue.Add(1);
    inbox.cv.notify_one();
  }
}

bool ShardServer::ReceiveShmOnIoThread(const std::string& identity, Work* w) {
  const Header& h = w->head.header;
  Status s = shm_.Receive(identity, h, &w->shm_payload, &w->shm);
  if (!s.ok()) {  // about the push, so that it fails at once
    // Nothing was counted: the worker sends this partition over the socket instead.
    s = s.WithPrefix("server " + std::to_string(server_id_) + " refused the shared memory of "
                     "worker " + std::to_string(h.sender) + " (partition " +
                     std::to_string(h.partition) + "): ");
    Head about = HeadAbout(h, MsgType::kError, server_id_);
    about.header.status = static_cast<uint16_t>(s.code());
    about.header.flags |= kFlagShmRefused;
    uint64_t suppressed = 0;
    if (limiter_.Allow(identity, &suppressed)) {
      TFPS_LOG(Warning) << "refused a shared-memory push from '" << EscapeForLog(identity)
                        << "': " << s.message() << SuppressedNote(suppressed);
    }
    (void)SendText(router_, identity, about.header, s.message());
    return false;
  }
  w->head.header.type = static_cast<uint16_t>(MsgType::kPushPull);
  return true;
}

void ShardServer::AcceptPushesOnIoThread(const std::string& identity, std::vector<Work> works) {
  Batch acks;
  for (Work& w : works) {
    const Header& h = w.head.header;
    if (!w.shm && !AdmitOnIoThread(identity, &w)) continue;
    if ((h.flags & kFlagAck) != 0) {
      acks.Add(Encoded{EncodeHead(HeadAbout(h, MsgType::kAck, server_id_)), zmq::message_t()});
    }
    Inbox& inbox = *inboxes_[ThreadOfPartition(h.key, h.partition,
                                                static_cast<int>(inboxes_.size()))];
    {
      std::lock_guard<std::mutex> lock(inbox.mu);
      inbox.queue.push_back(std::move(w));
    }
    metrics::server_pushes.Add();
    metrics::server_summation_queue.Add(1);
    inbox.cv.notify_one();
  }
  Status s = SendBatch(router_, identity, server_id_, &acks);
  uint64_t suppressed = 0;
  if (!s.ok() && limiter_.Allow(identity, &suppressed)) {
    TFPS_LOG(Warning) << "could not acknowledge to '" << EscapeForLog(identity)
                      << "': " << s.message() << SuppressedNote(suppressed);
  }
}

bool ShardServer::AdmitOnIoThread(const std::string& identity, Work* w) {
  const Header& h = w->head.header;
  Status s = budget_.Admit(h, w->payload.size(), server_id_);
  if (s.ok()) {
    w->data = budget_.Hold(h, std::move(w->payload));
    return true;
  }
  // The push fails at once (not silently, not after TFPS_TIMEOUT); the log is rate-limited
  // per peer, the answers are not (each refused push is an op its worker waits for) unless
  // the worker leaves kRefusalBytes of them unread (push_budget.h).
  Buffer text;
  const bool answered = budget_.HoldRefusal(h.sender, s.message(), &text);
  uint64_t suppressed = 0;
  if (limiter_.Allow(identity, &suppressed)) {
    TFPS_LOG(Warning) << s.message()
                      << (answered ? "" : " (not answered: the worker has not read the last "
                                          "1 MiB of refusals)")
                      << SuppressedNote(suppressed);
  }
  if (!answered) return false;
  Head about = HeadAbout(h, MsgType::kError, server_id_);
  about.header.status = static_cast<uint16_t>(s.code());
  (void)SendMessage(router_, identity, about, MessageOf(text));
  return false;
}

void ShardServer::OnBatchOnIoThread(const std::string& identity, const Header& batch,
                                    std::vector<zmq::message_t>& frames) {
  Status s = CheckBatch(batch, frames.size() - 2);
  std::vector<Work> works(s.ok() ? batch.count : 0);
  const double now_us = WallMicros();
  for (size_t i = 0; s.ok() && i < works.size(); ++i) {
    zmq::message_t& head_frame = frames[2 + 2 * i];
    zmq::message_t& payload = frames[3 + 2 * i];
    Work& w = works[i];
    s = DecodeHead(head_frame.data(), head_frame.size(), payload.size(), &w.head);
    if (s.ok()) s = CheckMessageSize(w.head.header, MaxMessageBytes());
    const Header& h = w.head.header;
    const bool push = h.type == static_cast<uint16_t>(MsgType::kPushPull) ||
                      h.type == static_cast<uint16_t>(MsgType::kPushPullShm);
    if (s.ok() && (!push || h.sender != batch.sender)) {
      s = InvalidArgument("a batch to a server holds only pushes of its sender");
    }
    if (!s.ok()) s = s.WithPrefix("message " + std::to_string(i) + " of the batch: ");
    w.kind = Work::kPush;
    w.received_us = now_us;
    w.payload = std::move(payload);
  }
  if (!s.ok()) {  // nothing of it is used: the worker's ops fail on the rejection or time out
    RejectOnIoThread(identity, "a malformed batch", s);
    return;
  }
  // Shared-memory heads (TFPS_SHM_SERVER): one whose segment is wrong fails alone.
  std::vector<Work> accepted;
  accepted.reserve(works.size());
  for (Work& w : works) {
    if (w.head.header.type == static_cast<uint16_t>(MsgType::kPushPullShm) &&
        !ReceiveShmOnIoThread(identity, &w)) {
      continue;
    }
    accepted.push_back(std::move(w));
  }
  AcceptPushesOnIoThread(identity, std::move(accepted));
}

void ShardServer::OnWorkerGoneOnIoThread(int rank, const std::string& why) {
  worker_state_[rank] = kGone;
  metrics::membership_changes.Add();
  shm_.Forget(WorkerIdentity(rank));
  TFPS_LOG(Error) << "worker " << rank << " is gone: " << why;
  for (auto& inbox : inboxes_) {
    Work w;
    w.kind = Work::kWorkerLost;
    w.rank = rank;
    w.why = why;
    {
      std::lock_guard<std::mutex> lock(inbox->mu);
      inbox->queue.push_back(std::move(w));
    }
    metrics::server_summation_queue.Add(1);
    inbox->cv.notify_one();
  }
}

void ShardServer::SendOutboxOnIoThread() {
  std::vector<Outgoing> batch;
  {
    std::lock_guard<std::mutex> lock(outbox_mu_);
    batch.swap(outbox_);
  }
  // Per worker, in order: small replies go together, large ones alone.
  const uint64_t fusion = static_cast<uint64_t>(config_.fusion_bytes);
  std::map<std::string, Batch> pending;
  auto flush = [this](const std::string& identity, Batch* b) {
    Status s = SendBatch(router_, identity, server_id_, b);
    uint64_t suppressed = 0;
    if (!s.ok() && limiter_.Allow(identity, &suppressed)) {  // a worker that reads nothing
      TFPS_LOG(Warning) << "could not answer '" << EscapeForLog(identity) << "': " << s.message()
                        << SuppressedNote(suppressed);
    }
  };
  for (Outgoing& o : batch) {
    const uint64_t bytes = o.payload.size();
    metrics::server_bytes_sent.Add(bytes);
    Batch& b = pending[o.identity];
    const bool alone = bytes >= fusion;
    if (alone || !b.Fits(bytes, fusion)) flush(o.identity, &b);
    b.Add(Encoded{std::move(o.head), MessageOf(o.payload)});
    if (alone) flush(o.identity, &b);
  }
  for (auto& entry : pending) flush(entry.first, &entry.second);
}

uint64_t ShardServer::MaxMessageBytes() const {
  return static_cast<uint64_t>(config_.max_message_bytes);
}

// Logging and answering are rate-limited per peer (limiter_): a peer that floods garbage
// and never reads gets a few answers per interval, the log a few lines and then counts.
void ShardServer::RejectOnIoThread(const std::string& identity, const char* what,
                                   const Status& status) {
  uint64_t suppressed = 0;
  if (!limiter_.Allow(identity, &suppressed)) return;
  TFPS_LOG(Warning) << "dropped " << what << " from '" << EscapeForLog(identity)
                    << "': " << status.message() << SuppressedNote(suppressed);
  Header h;
  h.type = static_cast<uint16_t>(MsgType::kError);
  h.status = static_cast<uint32_t>(status.code());
  h.sender = server_id_;
  Status s = SendText(router_, identity, h, status.message());
  if (!s.ok()) TFPS_LOG(Debug) << "could not send the rejection: " << s.message();
}

}  // namespace tfps

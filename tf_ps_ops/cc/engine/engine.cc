#include "tf_ps_ops/cc/engine/engine.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <thread>
#include <chrono>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <variant>

#include <zmq.hpp>

#include "tf_ps_ops/cc/cluster/notice.h"
#include "tf_ps_ops/cc/cluster/rendezvous.h"
#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/common/loop_thread.h"
#include "tf_ps_ops/cc/engine/local/device_reduce.h"
#include "tf_ps_ops/cc/engine/local/hierarchical.h"
#include "tf_ps_ops/cc/engine/partition.h"
#include "tf_ps_ops/cc/engine/push_codec.h"
#include "tf_ps_ops/cc/engine/local/shm_local_reduce.h"
#include "tf_ps_ops/cc/engine/stop_signal.h"
#include "tf_ps_ops/cc/engine/timeline.h"
#include "tf_ps_ops/cc/engine/timeline_control.h"
#include "tf_ps_ops/cc/transport/auth.h"
#include "tf_ps_ops/cc/transport/shm_segment.h"
#include "tf_ps_ops/cc/transport/zmq_util.h"

namespace tfps {

using Clock = std::chrono::steady_clock;

class Engine::Loop {
 public:
  Loop(const Config& config, int rank, int size)
      : config_(config), rank_(rank), context_(1),
        mesh_(context_, config, rank, size, loop_thread_) {
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    zap_ = ZapHandler::StartIfKeyed(context_, config_);  // before the peer port binds
  }
  ~Loop() { close(wake_fd_); }

  Status Connect(const EngineOptions& options, ClusterView* view);
  void RunOnLoop();
  using Request = std::variant<PushPullRequest, GatherRequest>;
  void Enqueue(std::vector<Request> requests);
  // Runs `task` on the engine thread with the timeline (timeline_control.h); false when
  // the loop is stopping.
  using TimelineTask = std::function<void(Timeline&, int rank)>;
  bool PostTimelineTask(TimelineTask task);
  void RequestStop();
  // The codec the engine would push `r` with (PushCodec::Choose; any thread: it reads only
  // what Init set).
  CodecSpec ChooseCodec(const PushPullRequest& r) const { return codec_.Choose(r); }
  // Called (on the engine thread) when a member's failure ends the job; at once if it
  // already has. Any thread.
  void OnJobFailed(std::function<void(const Status&)> listener) {
    std::lock_guard<std::mutex> lock(failed_mu_);
    if (!failed_seen_.ok()) {
      listener(failed_seen_);
      return;
    }
    failed_listeners_.push_back(std::move(listener));
  }
  EngineStats stats() const {
    // The mesh's count directly: a gather's caller may read it as soon as it is done.
    return EngineStats{bytes_sent_.load(), bytes_received_.load(), messages_sent_.load(),
                       mesh_.bytes_sent(), parts_sent_.load(), batches_sent_.load(),
                       batches_received_.load(), codec_.raw_bytes(), codec_.encoded_bytes(),
                       codec_.micros(), mesh_.bytes_received(), shm_parts_sent_.load()};
  }

 private:
  struct Server {
    std::string address;  // host:port, as the scheduler knows it
    std::unique_ptr<zmq::socket_t> socket;
    std::unique_ptr<Monitor> monitor;
    std::string dead;  // why it is unusable; empty while alive
    // TFPS_SHM_SERVER, a server on this host: the token it handed out, and per (key,
    // partition) the segment its dense partitions travel through (ps_server/shm_peers.h).
    std::string shm_token;
    std::map<std::pair<uint64_t, uint32_t>, std::unique_ptr<ShmSegment>> shm;
    // Partitions whose segment could not be reserved (a small /dev/shm): they stay on the
    // socket for the rest of the job; the first refusal is logged.
    std::set<std::pair<uint64_t, uint32_t>> shm_refused;
    // The step whose answer a segment waits for: the server reads the push in place until
    // it answers, so a push of another step meanwhile goes over the socket.
    std::map<std::pair<uint64_t, uint32_t>, uint64_t> shm_busy;
  };
  // kAcked: the server has it (credit returned), its answer is still due.
  enum PartState : uint8_t { kQueued = 0, kSent = 1, kAcked = 2, kDone = 3 };
  struct Op {
    PushPullRequest request;
    uint64_t key = 0;
    uint64_t step = 0;
    std::vector<Partition> parts;
    std::vector<PartState> part_state;
    CodecSpec codec;                    // kNone: partitions travel as they are
    uint64_t row_elems = 1;             // PS mode, rank >= 2: partitions hold whole rows
    std::vector<uint64_t> row_begin;    // sparse: partition i sends request rows
                                        // [row_begin[i], row_begin[i + 1])
    std::vector<HostBytes> device_encoded;  // request.device_codec: each partition's bytes
    int remaining = 0;
    Clock::time_point deadline;
    Clock::time_point started, first_sent;
    // Timed replies (TFPS_TIMELINE): the latest server wall-clock stamps over partitions.
    double push_received_us = 0, answer_ready_us = 0;
  };
  using PartId = std::tuple<uint64_t, uint64_t, uint32_t>;  // key, step, partition
  // A partition waiting for credit: ordered by priority, then by arrival.
  using ReadyPart = std::tuple<int, uint64_t, uint32_t>;  // priority, op id, partition

  void StartOnLoop(PushPullRequest request);
  // Sends queued partitions while the scheduling credit allows; small ones for the same
  // server leave together as one batch (TFPS_FUSION_BYTES).
  void PumpOnLoop();
  // Sends the partition, or adds it to its server's batch.
  Status SendPartOnLoop(uint64_t op_id, Op& op, uint32_t index);
  void FlushOnLoop(int server);  // sends the server's batch, failing its ops on error
  uint64_t PartBytes(const Op& op, uint32_t index) const {
    const size_t elem = DTypeSize(op.request.dtype);
    if (op.row_begin.empty()) return op.parts[index].count * elem;
    return (op.row_begin[index + 1] - op.row_begin[index]) *
           (sizeof(int64_t) + op.row_elems * elem);
  }
  // The partition's segment with the server (created on first use), nullptr with *status
  // on failure (TFPS_SHM_SERVER).
  ShmSegment* ShmOfOnLoop(int server, const Op& op, uint32_t index, Status* status);
  // The same, or nullptr when it cannot be reserved: that partition then takes the socket.
  ShmSegment* ShmOrSocketOnLoop(int server, const Op& op, uint32_t index);
  // The server refused a partition's segment (kFlagShmRefused: nothing counted): that
  // partition goes over the socket, now and for the rest of the job.
  void ResendOverSocketOnLoop(int server, uint64_t op_id, Op& op, uint32_t index,
                              const std::string& why);
  // What the partition weighs on the wire: its encoded size when compressed, so that the
  // scheduling credit and fusion count what is sent (docs/compression.md).
  uint64_t WireBytes(const Op& op, uint32_t index) const {
    if (op.codec.id == CodecId::kNone) return PartBytes(op, index);
    const uint64_t n = op.parts[index].count;
    return EncodedBytes(op.codec.id, n, SparseK(op.codec.ratio, n));
  }
  Status PrepareSparseOnLoop(Op& op) const;
  // request.device_codec: every partition encoded on the GPU, into op.device_encoded.
  Status EncodeOnDeviceOnLoop(Op& op);
  zmq::message_t SparsePayload(const Op& op, uint32_t index) const;
  Status OnSparseReplyOnLoop(Op& op, const Header& h, const zmq::message_t& payload);
  void OnMessageOnLoop(int server, std::vector<zmq::message_t>& frames);
  void OnReplyOnLoop(int server, zmq::message_t& head_frame, zmq::message_t* payload);
  void FinishOnLoop(uint64_t op_id, const Status& status);
  void ServerDiedOnLoop(int server, const std::string& why);
  void CheckDeadlinesOnLoop();
  void SayGoodbyeOnLoop();
  std::string Describe(int server) const {
    return "server " + std::to_string(server) + " (" + servers_[server].address + ")";
  }
  // Opens server i's socket, with its monitor, and says hello.
  Status OpenServerOnLoop(size_t i);
  // Connect() after the rendezvous: servers' hellos. A failure here is told to the others.
  Status JoinClusterOnLoop(const EngineOptions& options, ClusterView* view);
  // Reads the scheduler's notices (cluster/notice.h): warnings are logged; a failure of
  // another member sets job_failed_ and fails everything in flight. Returns job_failed_.
  Status ReadNoticesOnLoop();
  // SIGTERM arrived (stop_signal.h): tells the scheduler, then lets the signal end us.
  void StoppedBySignalOnLoop();
 public:
  void WatchStopSignal() { stop_fd_ = InstallStopSignal(); }
 private:
  int stop_fd_ = -1;

  const Config config_;
  const int rank_;
  zmq::context_t context_;
  std::unique_ptr<ZapHandler> zap_;  // with a job key: admits only its holders (peer port)
  std::unique_ptr<zmq::socket_t> scheduler_;
  Status job_failed_;  // from a member's failure the scheduler told us: every request fails
  std::mutex failed_mu_;
  Status failed_seen_;  // job_failed_, for OnJobFailed (guarded by failed_mu_)
  std::vector<std::function<void(const Status&)>> failed_listeners_;  // guarded by failed_mu_
  std::vector<Server> servers_;
  std::string own_host_;  // as the scheduler sees this worker (colocated servers share it)
  // The engine thread once RunOnLoop starts; until then the thread in Engine::Init, which
  // connects. Declared before mesh_, which checks against it too.
  LoopThread loop_thread_;
  PeerMesh mesh_;

  std::mutex queue_mu_;
  std::deque<Request> queue_;  // guarded by queue_mu_
  bool stopping_ = false;              // guarded by queue_mu_
  std::vector<TimelineTask> timeline_tasks_;  // guarded by queue_mu_
  int wake_fd_ = -1;

  // Engine-thread state.
  std::unordered_map<std::string, uint64_t> steps_;  // per-name call count
  // Per name, how many partitions its last push had: where an abort of the name goes.
  std::unordered_map<std::string, uint32_t> partitions_;
  uint64_t next_op_id_ = 1;
  std::map<uint64_t, Op> ops_;  // by id: ids grow with time, so deadlines are in order
  std::map<PartId, uint64_t> pending_;  // partition sent, answer awaited -> op id
  std::set<ReadyPart> ready_;           // partitions waiting for credit
  uint64_t in_flight_bytes_ = 0;
  struct ServerBatch {
    Batch batch;
    std::vector<uint64_t> op_ids;  // the ops its partitions belong to
  };
  std::vector<ServerBatch> batches_;  // per server: partitions to send together
  Timeline timeline_;
  PushCodec codec_;

  std::atomic<uint64_t> bytes_sent_{0}, bytes_received_{0}, messages_sent_{0},
      parts_sent_{0}, batches_sent_{0}, batches_received_{0}, shm_parts_sent_{0};
};

Status Engine::Loop::Connect(const EngineOptions& options, ClusterView* view) {
  TFPS_RETURN_IF_ERROR(codec_.Init(config_));  // a bad TFPS_COMPRESSION fails before rendezvous
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

Status Engine::Loop::ReadNoticesOnLoop() {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  std::vector<zmq::message_t> frames;
  while (RecvFrames(*scheduler_, &frames)) {
    if (AnswerPing(*scheduler_, frames)) continue;  // this thread lives (notice.h)
    Code code = Code::kOk;
    NoticeAbout about;
    std::string text;
    if (!ReadNotice(frames, &code, &about, &text)) continue;
    if (code == Code::kOk) {
      TFPS_LOG(Warning) << text;
      continue;
    }
    if (!job_failed_.ok()) continue;
    job_failed_ = Status(code, JobFailedMessage(text));
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
  return job_failed_;
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

Status Engine::Loop::JoinClusterOnLoop(const EngineOptions& options, ClusterView* view) {
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
    servers_[i].address = view->servers[i];
    TFPS_RETURN_IF_ERROR(OpenServerOnLoop(i));
  }
  batches_.resize(servers_.size());
  // Every server must answer the hello (and so accept our protocol version) in time.
  std::vector<bool> answered(servers_.size(), false);
  size_t num_answered = 0;
  const auto deadline = Clock::now() + std::chrono::duration<double>(config_.timeout_s);
  std::vector<zmq::message_t> frames;
  while (num_answered < servers_.size()) {
    if (Clock::now() > deadline) {
      for (size_t i = 0; i < servers_.size(); ++i) {
        if (!answered[i]) {
          return DeadlineExceeded(Describe(static_cast<int>(i)) + " did not answer within " +
                                  std::to_string(config_.timeout_s) +
                                  " s (TFPS_TIMEOUT): is it reachable from this host?");
        }
      }
    }
    std::vector<zmq::pollitem_t> items;
    for (Server& s : servers_) items.push_back({s.socket->handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({scheduler_->handle(), 0, ZMQ_POLLIN, 0});
    Poll(items.data(), items.size(), 100);
    TFPS_RETURN_IF_ERROR(ReadNoticesOnLoop());
    for (size_t i = 0; i < servers_.size(); ++i) {
      if (!RecvFrames(*servers_[i].socket, &frames)) continue;
      Head head;
      const size_t payload = frames.size() > 1 ? frames[1].size() : 0;
      Status st = DecodeHead(frames[0].data(), frames[0].size(), payload, &head);
      if (st.ok() && head.header.type == static_cast<uint16_t>(MsgType::kError)) {
        // The text frame is optional, as in OnReplyOnLoop.
        st = Status(static_cast<Code>(head.header.status),
                    frames.size() > 1 ? frames[1].to_string() : "(no reason given)");
      }
      if (!st.ok()) return st.WithPrefix(Describe(static_cast<int>(i)) + " refused us: ");
      if (head.header.type == static_cast<uint16_t>(MsgType::kHelloReply) && !answered[i]) {
        answered[i] = true;
        ++num_answered;
        const std::string offer = frames.size() > 1 ? frames[1].to_string() : "";
        std::string why;
        if (!AcceptShmOffer(offer, &servers_[i].shm_token, &why) && !why.empty()) {
          TFPS_LOG(Info) << "TFPS_SHM_SERVER: " << Describe(static_cast<int>(i))
                         << " is on this host but " << why << "; its traffic takes the socket";
        }
      }
    }
  }
  return Status::Ok();
}

Status Engine::Loop::OpenServerOnLoop(size_t i) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  Server& s = servers_[i];
  s.socket = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
  SetCommonOptions(*s.socket, config_);
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

void Engine::Loop::Enqueue(std::vector<Request> requests) {
  bool accepted = false;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (!stopping_) {
      for (Request& r : requests) queue_.push_back(std::move(r));
      accepted = true;
    }
  }
  if (!accepted) {
    const Status aborted = Aborted("tf_ps_ops is shutting down; the request was not started");
    for (Request& request : requests) {
      if (auto* p = std::get_if<PushPullRequest>(&request)) p->done(aborted);
      if (auto* g = std::get_if<GatherRequest>(&request)) g->done(aborted, {});
    }
    return;
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

bool Engine::Loop::PostTimelineTask(TimelineTask task) {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (stopping_) return false;
    timeline_tasks_.push_back(std::move(task));
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  return true;
}

void Engine::Loop::RequestStop() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stopping_ = true;
  }
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void Engine::Loop::RunOnLoop() {
  loop_thread_.Claim();  // from here on, the loop's state is this thread's alone
  std::vector<zmq::message_t> frames;
  std::vector<zmq::pollitem_t> items;
  while (true) {
    items.clear();
    for (Server& s : servers_) {
      items.push_back({s.socket->handle(), 0, ZMQ_POLLIN, 0});
      items.push_back({s.monitor->socket().handle(), 0, ZMQ_POLLIN, 0});
    }
    items.push_back({nullptr, wake_fd_, ZMQ_POLLIN, 0});
    items.push_back({scheduler_->handle(), 0, ZMQ_POLLIN, 0});
    if (stop_fd_ >= 0) items.push_back({nullptr, stop_fd_, ZMQ_POLLIN, 0});
    mesh_.AppendPollItems(&items);
    Poll(items.data(), items.size(), 100);
    uint64_t n;
    (void)!read(wake_fd_, &n, sizeof(n));

    std::deque<Request> batch;
    std::vector<TimelineTask> timeline_tasks;
    bool stop;
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      batch.swap(queue_);
      timeline_tasks.swap(timeline_tasks_);
      stop = stopping_;
    }
    for (TimelineTask& task : timeline_tasks) task(timeline_, rank_);
    if (!batch.empty()) timeline_.MarkCycle();
    if (stop_fd_ >= 0 && CaughtStopSignal() != 0) StoppedBySignalOnLoop();
    const Status failed = ReadNoticesOnLoop();
    for (Request& r : batch) {
      auto* p = std::get_if<PushPullRequest>(&r);
      auto* g = std::get_if<GatherRequest>(&r);
      if (!failed.ok()) {
        const std::string rank = " on rank " + std::to_string(rank_) + ": ";
        if (p != nullptr) p->done(failed.WithPrefix("push_pull of tensor '" + p->name + "'" + rank));
        if (g != nullptr) g->done(failed.WithPrefix("allgather of '" + g->name + "'" + rank), {});
        continue;
      }
      if (p != nullptr) StartOnLoop(std::move(*p));
      if (g != nullptr) mesh_.StartOnLoop(std::move(*g));
    }
    PumpOnLoop();  // everything started together can leave together
    mesh_.PollOnLoop();
    for (size_t i = 0; i < servers_.size(); ++i) {
      while (RecvFrames(*servers_[i].socket, &frames)) OnMessageOnLoop(static_cast<int>(i), frames);
      int event = 0, value = 0;
      std::string address;
      while (servers_[i].monitor->Read(&event, &value, &address)) {
        if (event == ZMQ_EVENT_DISCONNECTED) {
          ServerDiedOnLoop(static_cast<int>(i), "closed the connection (did the server die?)");
        }
      }
    }
    PumpOnLoop();  // answers freed credit
    CheckDeadlinesOnLoop();
    mesh_.CheckDeadlinesOnLoop(Clock::now());
    if (stop) break;
  }
  const Status aborted = Aborted("tf_ps_ops was shut down while this request was in flight");
  while (!ops_.empty()) FinishOnLoop(ops_.begin()->first, aborted);
  mesh_.FailAllOnLoop(aborted);
  SayGoodbyeOnLoop();
  Status written = timeline_.Write();
  if (!written.ok()) TFPS_LOG(Error) << written.message();
}

void Engine::Loop::StartOnLoop(PushPullRequest request) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const size_t elem = DTypeSize(request.dtype);
  Op op;
  op.key = KeyOfName(request.name);
  op.step = ++steps_[request.name];
  const bool ps = (request.flags & (kFlagPsInit | kFlagPsApply)) != 0;
  op.row_elems = ps ? RowElements(request.dims) : 1;
  // A join is one element per server, each its own partition: PartitionTensor places
  // partition i of n on server (hash + i) % n, so every server gets one. An abort is one
  // partition whatever TFPS_PARTITION_BYTES says (the server refuses it otherwise).
  int64_t partition_bytes = config_.partition_bytes;
  if (request.join) partition_bytes = static_cast<int64_t>(elem);
  if ((request.flags & kFlagAbortRound) != 0) {
    partition_bytes = std::max<int64_t>(partition_bytes,
                                        static_cast<int64_t>(request.count * elem));
  }
  op.parts = PartitionTensor(op.key, request.count, elem, partition_bytes,
                             static_cast<int>(servers_.size()), op.row_elems);
  if ((request.flags & kFlagAbortRound) != 0) {
    // The reason goes whole to every partition the name's last push had (on different
    // servers, each with a round of its own to fail): partition 0's alone left the others'
    // rounds to time out on their servers.
    const auto last = partitions_.find(request.name);
    const uint32_t n = last == partitions_.end() ? 1 : last->second;
    op.parts.clear();
    for (uint32_t i = 0; i < n; ++i) {
      op.parts.push_back(Partition{i, 0, request.count,
                                   ServerOfPartition(op.key, i, static_cast<int>(servers_.size()))});
    }
  } else if (!request.join) {
    partitions_[request.name] = static_cast<uint32_t>(op.parts.size());
  }
  op.part_state.assign(op.parts.size(), kQueued);
  op.codec = codec_.Choose(request);
  op.remaining = static_cast<int>(op.parts.size());
  op.started = Clock::now();
  // Servers time out first and name the missing worker; this is the backstop.
  op.deadline = op.started + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(config_.timeout_s * 1.1 + 1.0));
  op.request = std::move(request);
  const uint64_t id = next_op_id_++;
  Op& o = ops_.emplace(id, std::move(op)).first->second;
  timeline_.Record(o.request.name, "queued", o.request.enqueued, o.started, 0);
  if ((o.request.flags & kFlagSparse) != 0) {
    Status s = PrepareSparseOnLoop(o);
    if (!s.ok()) {
      FinishOnLoop(id, s);
      return;
    }
  }
  for (const Partition& p : o.parts) {
    if (!servers_[p.server].dead.empty()) {
      FinishOnLoop(id, Unavailable(Describe(p.server) + " " + servers_[p.server].dead));
      return;
    }
  }
  if (o.request.device_codec != nullptr) {
    Status s = EncodeOnDeviceOnLoop(o);
    if (!s.ok()) {
      FinishOnLoop(id, s);
      return;
    }
  }
  for (const Partition& p : o.parts) ready_.emplace(o.request.priority, id, p.index);
}

void Engine::Loop::PumpOnLoop() {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const uint64_t credit = static_cast<uint64_t>(config_.scheduling_credit);
  while (!ready_.empty()) {
    const auto [priority, id, index] = *ready_.begin();
    auto it = ops_.find(id);
    if (it == ops_.end()) {  // the op failed meanwhile
      ready_.erase(ready_.begin());
      continue;
    }
    const uint64_t bytes = WireBytes(it->second, index);
    // Always let one partition fly, however large: credit bounds queuing, not progress.
    if (credit > 0 && in_flight_bytes_ > 0 && in_flight_bytes_ + bytes > credit) break;
    ready_.erase(ready_.begin());
    Status s = SendPartOnLoop(id, it->second, index);
    if (!s.ok()) FinishOnLoop(id, s);
  }
  for (size_t server = 0; server < batches_.size(); ++server) {
    FlushOnLoop(static_cast<int>(server));
  }
}

void Engine::Loop::FlushOnLoop(int server) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  ServerBatch& b = batches_[server];
  if (b.batch.messages.empty()) return;
  const bool single = b.batch.messages.size() == 1;
  Status s = SendBatch(*servers_[server].socket, "", rank_, &b.batch);
  std::vector<uint64_t> ids;
  ids.swap(b.op_ids);
  if (s.ok()) {
    ++messages_sent_;
    if (!single) ++batches_sent_;
    return;
  }
  s = s.WithPrefix("sending to " + Describe(server) + ": ");
  for (uint64_t id : ids) {
    if (ops_.count(id) != 0) FinishOnLoop(id, s);
  }
}

Status Engine::Loop::SendPartOnLoop(uint64_t op_id, Op& o, uint32_t index) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const PushPullRequest& r = o.request;
  const Partition& p = o.parts[index];
  const size_t elem = DTypeSize(r.dtype);
  const bool no_data = r.root_rank >= 0 && r.root_rank != rank_;
  const uint64_t bytes = no_data ? 0 : PartBytes(o, index);
  const uint64_t wire = no_data ? 0 : WireBytes(o, index);
  const uint64_t fusion = static_cast<uint64_t>(config_.fusion_bytes);
  const bool fuse = wire < fusion && !r.join;  // TFPS_FUSION_BYTES=0: never
  // Through the colocated server's shared memory (TFPS_SHM_SERVER): the head alone
  // travels, batched with the other heads and small pushes for that server.
  bool shm = !fuse && !no_data && !r.join && o.row_begin.empty() &&
                   o.codec.id == CodecId::kNone && !servers_[p.server].shm_token.empty() &&
                   servers_[p.server].shm_busy.count({o.key, index}) == 0;
  ShmSegment* segment = shm ? ShmOrSocketOnLoop(p.server, o, index) : nullptr;
  if (segment == nullptr) shm = false;
  const bool batched = fuse || (shm && fusion > 0);
  if (batched && !batches_[p.server].batch.Fits(fuse ? wire : 0, fusion)) {
    FlushOnLoop(p.server);
    // A failed send fails every op in that batch, possibly this one (`o` is then gone).
    if (ops_.count(op_id) == 0) return Status::Ok();
  }
  Head head;
  Header& h = head.header;
  h.type = static_cast<uint16_t>(MsgType::kPushPull);
  h.key = o.key;
  h.partition = p.index;
  h.num_partitions = static_cast<uint32_t>(o.parts.size());
  h.step = o.step;
  h.dtype = static_cast<uint8_t>(r.dtype);
  h.flags = (no_data ? kFlagNoData : 0) | r.flags | (timeline_.enabled() ? kFlagTimed : 0) |
            (config_.scheduling_credit > 0 ? kFlagAck : 0) |
            (r.root_rank >= 0 ? kFlagBroadcast : 0) | (r.members.empty() ? 0 : kFlagProcessSet);
  head.members = r.members;
  if (r.join) {  // no acknowledgement, no timeline: a join is answered when all joined
    h.type = static_cast<uint16_t>(MsgType::kJoin);
    h.flags = r.flags & (kFlagJoinLeads | kFlagJoinRelease);
  }
  h.optimizer = static_cast<uint8_t>(r.optimizer);
  head.params = r.params;
  h.reduce_op = static_cast<uint8_t>(r.reduce_op);
  if (r.root_rank >= 0 && (r.flags & (kFlagPsInit | kFlagPsApply | kFlagSparse)) == 0) {
    head.params = {static_cast<double>(r.root_rank)};  // the server checks every worker
  }                                                     // names the same root
  h.sender = rank_;
  h.count = p.count;
  h.total_count = r.count;
  head.dims = r.dims;
  const bool sparse = !o.row_begin.empty();
  if (sparse) h.count = o.row_begin[index + 1] - o.row_begin[index];
  zmq::message_t payload;
  uint64_t wire_bytes = bytes;
  if (!o.device_encoded.empty()) {  // encoded on the GPU (EncodeOnDeviceOnLoop)
    const HostBytes& encoded = o.device_encoded[index];
    h.codec = static_cast<uint8_t>(o.codec.id);
    if (!codec_.FeedbackFor(r)) h.flags |= kFlagNoFeedback;
    wire_bytes = encoded.size;
    payload = ZeroCopyMessage(encoded.data, encoded.size, encoded.holder);
  } else if (o.codec.id != CodecId::kNone) {
    std::shared_ptr<EncodedPart> encoded;
    TFPS_RETURN_IF_ERROR(codec_.EncodePart(r, o.codec, o.key, p.index, o.step,
                                           static_cast<const float*>(r.input) + p.offset,
                                           p.count, &encoded));
    h.codec = static_cast<uint8_t>(o.codec.id);
    if (!codec_.FeedbackFor(r)) h.flags |= kFlagNoFeedback;
    wire_bytes = encoded->size();
    payload = ZeroCopyMessage(encoded->data(), encoded->size(), encoded);
  } else if (shm) {
    std::memcpy(segment->data(), static_cast<const char*>(r.input) + p.offset * elem, bytes);
    h.type = static_cast<uint16_t>(MsgType::kPushPullShm);  // the head alone travels
    servers_[p.server].shm_busy[{o.key, index}] = o.step;
    ++shm_parts_sent_;
  } else {
    payload = sparse ? SparsePayload(o, index)
                     : ZeroCopyMessage(static_cast<const char*>(r.input) + p.offset * elem,
                                       bytes, r.input_holder);
  }
  if (batched) {
    batches_[p.server].batch.Add(Encoded{EncodeHead(head), std::move(payload)});
    batches_[p.server].op_ids.push_back(op_id);
  } else {
    Status s = SendMessage(*servers_[p.server].socket, "", head, std::move(payload));
    if (!s.ok()) return s.WithPrefix("sending to " + Describe(p.server) + ": ");
    ++messages_sent_;
  }
  if (o.first_sent == Clock::time_point()) o.first_sent = Clock::now();  // the first partition
  o.part_state[index] = kSent;
  pending_[PartId(o.key, o.step, p.index)] = op_id;
  in_flight_bytes_ += WireBytes(o, index);
  bytes_sent_ += wire_bytes;
  ++parts_sent_;
  return Status::Ok();
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

void Engine::Loop::OnMessageOnLoop(int server, std::vector<zmq::message_t>& frames) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  if (!IsBatchHead(frames[0].data(), frames[0].size())) {
    if (frames.size() > 2) {
      TFPS_LOG(Warning) << "dropped a reply of " << frames.size() << " frames from "
                        << Describe(server);
      return;
    }
    OnReplyOnLoop(server, frames[0], frames.size() > 1 ? &frames[1] : nullptr);
    return;
  }
  Head batch;
  Status s = DecodeHead(frames[0].data(), frames[0].size(), 0, &batch);
  if (s.ok()) s = CheckBatch(batch.header, frames.size() - 1);
  if (!s.ok()) {
    TFPS_LOG(Warning) << "dropped a malformed batch from " << Describe(server) << ": "
                      << s.message();
    return;
  }
  ++batches_received_;
  for (size_t i = 1; i + 1 < frames.size(); i += 2) OnReplyOnLoop(server, frames[i], &frames[i + 1]);
}

void Engine::Loop::OnReplyOnLoop(int server, zmq::message_t& head_frame,
                                 zmq::message_t* payload_frame) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  Head head;
  const size_t payload = payload_frame != nullptr ? payload_frame->size() : 0;
  Status s = DecodeHead(head_frame.data(), head_frame.size(), payload, &head);
  if (s.ok() && head.header.type == static_cast<uint16_t>(MsgType::kBatch)) {
    s = InvalidArgument("a batch inside a batch");
  }
  if (!s.ok()) {
    TFPS_LOG(Warning) << "dropped a malformed reply from " << Describe(server) << ": "
                      << s.message();
    return;
  }
  const Header& h = head.header;
  bool pushed_in_shm = false;  // this answers a push that went through shared memory
  if (h.type != static_cast<uint16_t>(MsgType::kAck)) {  // answered: the segment is free
    auto busy = servers_[server].shm_busy.find({h.key, h.partition});
    if (busy != servers_[server].shm_busy.end() && busy->second == h.step) {
      pushed_in_shm = true;
      servers_[server].shm_busy.erase(busy);
      // The server has opened the segment (or refused it): no one needs the memfd now.
      auto segment = servers_[server].shm.find({h.key, h.partition});
      if (segment != servers_[server].shm.end()) segment->second->CloseFd();
    }
  }
  auto it = pending_.find(PartId(h.key, h.step, h.partition));
  const std::string text =
      h.type == static_cast<uint16_t>(MsgType::kError) && payload_frame != nullptr
          ? payload_frame->to_string() : "";
  if (it == pending_.end()) {
    if (h.type == static_cast<uint16_t>(MsgType::kError)) {
      TFPS_LOG(Error) << Describe(server) << " reported: " << text;
    } else {
      TFPS_LOG(Debug) << "late reply from " << Describe(server) << " for a finished push_pull";
    }
    return;
  }
  const uint64_t id = it->second;
  Op& op = ops_.at(id);
  if (op.part_state[h.partition] == kSent) in_flight_bytes_ -= WireBytes(op, h.partition);
  if (h.type == static_cast<uint16_t>(MsgType::kAck)) {  // credit back; the answer is due
    if (op.part_state[h.partition] == kSent) op.part_state[h.partition] = kAcked;
    return;
  }
  pending_.erase(it);
  op.part_state[h.partition] = kDone;
  if (h.type == static_cast<uint16_t>(MsgType::kError) && (h.flags & kFlagShmRefused) != 0 &&
      pushed_in_shm && h.partition < op.parts.size() && op.row_begin.empty() &&
      servers_[server].shm_refused.count({h.key, h.partition}) == 0) {  // once, not a loop
    ResendOverSocketOnLoop(server, id, op, h.partition, text);
    return;
  }
  if (h.type == static_cast<uint16_t>(MsgType::kError)) {
    FinishOnLoop(id, Status(static_cast<Code>(h.status), text));
    return;
  }
  if ((h.flags & kFlagTimed) != 0) {
    op.push_received_us = std::max(op.push_received_us, head.params[0]);
    op.answer_ready_us = std::max(op.answer_ready_us, head.params[1]);
  }
  if (!op.row_begin.empty()) {
    s = payload_frame == nullptr ? Internal("a sparse reply without payload frame")
                                 : OnSparseReplyOnLoop(op, h, *payload_frame);
    if (!s.ok()) {
      FinishOnLoop(id, s.WithPrefix(Describe(server) + ": "));
      return;
    }
    bytes_received_ += payload_frame->size();
    if (--op.remaining == 0) FinishOnLoop(id, Status::Ok());
    return;
  }
  const Partition& p = op.parts[h.partition];
  const size_t elem = DTypeSize(op.request.dtype);
  const bool in_shm = h.type == static_cast<uint16_t>(MsgType::kPushPullReplyShm);
  const ShmSegment* shm = nullptr;
  if (in_shm) {
    auto found = servers_[server].shm.find({h.key, h.partition});
    if (found != servers_[server].shm.end()) shm = found->second.get();
  }
  if ((h.type != static_cast<uint16_t>(MsgType::kPushPullReply) && shm == nullptr) ||
      h.count != p.count ||
      h.dtype != static_cast<uint8_t>(op.request.dtype) ||
      h.codec != static_cast<uint8_t>(PushCodec::ReplyCodec(op.request, op.codec))) {
    FinishOnLoop(id, Internal(Describe(server) + " answered partition " +
                              std::to_string(h.partition) + " with the wrong type or size"));
    return;
  }
  char* out = static_cast<char*>(op.request.output) + p.offset * elem;
  if (op.request.device_codec != nullptr && h.codec == 0) {  // output is device memory
    FinishOnLoop(id, Internal(Describe(server) + " answered partition " +
                              std::to_string(h.partition) + " of a GPU-encoded call "
                              "uncompressed"));
    return;
  }
  if (h.codec != 0 && op.request.device_codec != nullptr) {
    uint64_t k = 0;
    s = CheckEncoded(static_cast<CodecId>(h.codec), h.count, payload_frame->size(), &k);
    if (s.ok()) {
      s = op.request.device_codec->TakeReply(static_cast<CodecId>(h.codec), p, k,
                                             RandomKSeed(h.key, h.partition, h.step),
                                             payload_frame->data(), payload_frame->size());
    }
    if (!s.ok()) {
      FinishOnLoop(id, s.WithPrefix(Describe(server) + ": "));
      return;
    }
  } else if (h.codec != 0) {
    s = codec_.DecodeReply(h, payload_frame->data(), payload_frame->size(),
                           reinterpret_cast<float*>(out));
    if (!s.ok()) {
      FinishOnLoop(id, s.WithPrefix(Describe(server) + ": "));
      return;
    }
  } else if (p.count > 0) {
    std::memcpy(out, in_shm ? shm->data() : payload_frame->data(), p.count * elem);
  }
  bytes_received_ += payload_frame != nullptr ? payload_frame->size() : 0;
  if (--op.remaining == 0) FinishOnLoop(id, Status::Ok());
}

Status Engine::Loop::EncodeOnDeviceOnLoop(Op& op) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const PushPullRequest& r = op.request;
  if (op.codec.id == CodecId::kNone || !op.row_begin.empty()) {
    return Internal("'" + r.name + "' came to be encoded on the GPU but is not compressed");
  }
  uint64_t raw = 0, encoded = 0;
  for (const Partition& p : op.parts) {
    if (p.count > kMaxEncodedElements) {
      return InvalidArgument("compressing '" + r.name + "': a partition of " +
                             std::to_string(p.count) + " elements is more than a compressed "
                             "message may carry (" + std::to_string(kMaxEncodedElements) +
                             "); lower TFPS_PARTITION_BYTES");
    }
  }
  TFPS_RETURN_IF_ERROR(r.device_codec
                           ->EncodeParts(op.codec, codec_.FeedbackFor(r), op.key, op.step,
                                         op.parts, &op.device_encoded)
                           .WithPrefix("compressing '" + r.name + "' on the GPU: "));
  bool sizes_ok = op.device_encoded.size() == op.parts.size();
  for (size_t i = 0; sizes_ok && i < op.parts.size(); ++i) {
    const uint64_t n = op.parts[i].count;
    sizes_ok = op.device_encoded[i].size ==
               EncodedBytes(op.codec.id, n, SparseK(op.codec.ratio, n));
    raw += 4 * n;
    encoded += op.device_encoded[i].size;
  }
  if (!sizes_ok) {
    op.device_encoded.clear();
    return Internal("compressing '" + r.name + "' on the GPU gave parts of the wrong size");
  }
  codec_.Count(raw, encoded);
  return Status::Ok();
}

// Checks a sparse request and finds each partition's rows. Only whole rows can be cut out
// of a partition, so a row must fit in one (TFPS_PARTITION_BYTES).
Status Engine::Loop::PrepareSparseOnLoop(Op& op) const {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const PushPullRequest& r = op.request;
  const size_t elem = DTypeSize(r.dtype);
  if (r.dims.empty()) return InvalidArgument("a sparse update needs a tensor of rank >= 1");
  const uint64_t row_bytes = op.row_elems * elem;
  if (op.row_elems > 1 && row_bytes > static_cast<uint64_t>(config_.partition_bytes)) {
    return InvalidArgument("rows of " + std::to_string(row_bytes) + " bytes do not fit in a "
                           "partition (TFPS_PARTITION_BYTES=" +
                           std::to_string(config_.partition_bytes) +
                           "): sparse updates need whole rows per partition");
  }
  const uint64_t num_rows = static_cast<uint64_t>(r.dims[0]);
  for (uint64_t i = 0; i < r.num_rows; ++i) {
    if (r.rows[i] < 0 || static_cast<uint64_t>(r.rows[i]) >= num_rows ||
        (i > 0 && r.rows[i] <= r.rows[i - 1])) {
      return InvalidArgument("sparse row ids must be increasing and within [0, " +
                             std::to_string(num_rows) + "); got " + std::to_string(r.rows[i]));
    }
  }
  op.row_begin.resize(op.parts.size() + 1);
  for (size_t i = 0; i < op.parts.size(); ++i) {
    const int64_t first = static_cast<int64_t>(op.parts[i].offset / op.row_elems);
    op.row_begin[i] = std::lower_bound(r.rows, r.rows + r.num_rows, first) - r.rows;
  }
  op.row_begin.back() = r.num_rows;
  return Status::Ok();
}

// [local row ids][rows]: the request's rows in this partition, copied (they are few).
zmq::message_t Engine::Loop::SparsePayload(const Op& op, uint32_t index) const {
  const PushPullRequest& r = op.request;
  const uint64_t begin = op.row_begin[index], n = op.row_begin[index + 1] - begin;
  const uint64_t row_bytes = op.row_elems * DTypeSize(r.dtype);
  const int64_t first = static_cast<int64_t>(op.parts[index].offset / op.row_elems);
  zmq::message_t payload(n * (sizeof(int64_t) + row_bytes));
  auto* ids = static_cast<int64_t*>(payload.data());
  for (uint64_t i = 0; i < n; ++i) ids[i] = r.rows[begin + i] - first;
  if (n > 0) {
    std::memcpy(ids + n, static_cast<const char*>(r.input) + begin * row_bytes, n * row_bytes);
  }
  return payload;
}

Status Engine::Loop::OnSparseReplyOnLoop(Op& op, const Header& h, const zmq::message_t& payload) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const Partition& p = op.parts[h.partition];
  if (h.type != static_cast<uint16_t>(MsgType::kPushPullReply) || (h.flags & kFlagSparse) == 0 ||
      h.dtype != static_cast<uint8_t>(op.request.dtype)) {
    return Internal("answered sparse partition " + std::to_string(h.partition) +
                    " with the wrong type");
  }
  const uint64_t rows_here = p.count / op.row_elems;
  const auto* local = static_cast<const int64_t*>(payload.data());
  std::vector<int64_t> ids(h.count);
  const int64_t first = static_cast<int64_t>(p.offset / op.row_elems);
  for (uint64_t i = 0; i < h.count; ++i) {
    if (local[i] < 0 || static_cast<uint64_t>(local[i]) >= rows_here) {
      return Internal("answered row " + std::to_string(local[i]) + " outside partition " +
                      std::to_string(h.partition));
    }
    ids[i] = local[i] + first;
  }
  if (op.request.on_rows && h.count > 0) op.request.on_rows(ids.data(), h.count, local + h.count);
  return Status::Ok();
}

void Engine::Loop::FinishOnLoop(uint64_t op_id, const Status& status) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  auto it = ops_.find(op_id);
  if (it == ops_.end()) return;  // finished already (a failed batch send took it)
  Op& op = it->second;
  for (const Partition& p : op.parts) {
    // Queued ones are skipped by PumpOnLoop; only unacknowledged ones hold credit.
    if (op.part_state[p.index] != kSent && op.part_state[p.index] != kAcked) continue;
    pending_.erase(PartId(op.key, op.step, p.index));
    if (op.part_state[p.index] == kSent) in_flight_bytes_ -= WireBytes(op, p.index);
  }
  auto done = std::move(op.request.done);
  const std::string name = op.request.name;
  const uint64_t step = op.step;
  uint64_t bytes = op.request.count * DTypeSize(op.request.dtype);
  if (!op.row_begin.empty()) {  // sparse: the rows pushed
    bytes = op.request.num_rows * (sizeof(int64_t) + op.row_elems * DTypeSize(op.request.dtype));
  }
  const Clock::time_point answered = Clock::now();
  if (status.ok() && timeline_.enabled()) {
    timeline_.Record(name, "scheduled", op.started, op.first_sent, bytes);
    if (op.answer_ready_us > 0) {  // split at the server's stamps, kept in order
      const auto pushed =
          std::clamp(timeline_.FromWallMicros(op.push_received_us), op.first_sent, answered);
      const auto ready =
          std::clamp(timeline_.FromWallMicros(op.answer_ready_us), pushed, answered);
      timeline_.Record(name, "push", op.first_sent, pushed, bytes);
      timeline_.Record(name, "server", pushed, ready, bytes);
      timeline_.Record(name, "pull", ready, answered, bytes);
    } else {
      timeline_.Record(name, "push_pull", op.first_sent, answered, bytes);
    }
  }
  ops_.erase(it);
  done(status.WithPrefix("push_pull of tensor '" + name + "' (call " + std::to_string(step) +
                         " on rank " + std::to_string(rank_) + "): "));
  timeline_.Record(name, "written", answered, Clock::now(), bytes);
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
}

void Engine::Loop::CheckDeadlinesOnLoop() {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const auto now = Clock::now();
  while (!ops_.empty() && ops_.begin()->second.deadline < now) {
    const Op& op = ops_.begin()->second;
    std::string missing;
    for (size_t i = 0; i < op.parts.size(); ++i) {
      if (op.part_state[i] != kDone) {
        missing += (missing.empty() ? "" : ", ") + Describe(op.parts[i].server);
        break;
      }
    }
    FinishOnLoop(ops_.begin()->first,
                 DeadlineExceeded("no answer after " + std::to_string(int(config_.timeout_s)) +
                                  " s (TFPS_TIMEOUT) from " + missing +
                                  "; another worker may be slow, stuck or dead"));
  }
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
    s.socket->close();
    for (auto& kv : s.shm) kv.second->Unlink();  // a server that never mapped it
    s.shm.clear();
  }
  scheduler_->close();
  mesh_.CloseOnLoop();
}

// ---------------------------------------------------------------------------------------

namespace {

// How StartTimeline / StopTimeline reach the running engine's thread (set by Init).
std::mutex& TimelinePosterMutex() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}

std::function<bool(std::function<void(Timeline&, int)>)>& TimelinePoster() {
  static auto* poster = new std::function<bool(std::function<void(Timeline&, int)>)>();
  return *poster;
}

// Runs `task` on the engine thread and waits for its status.
Status OnTimeline(std::function<Status(Timeline&, int)> task) {
  auto result = std::make_shared<std::promise<Status>>();
  std::future<Status> done = result->get_future();
  bool posted = false;
  {
    std::lock_guard<std::mutex> lock(TimelinePosterMutex());
    if (TimelinePoster()) {
      posted = TimelinePoster()([task, result](Timeline& timeline, int rank) {
        result->set_value(task(timeline, rank));
      });
    }
  }
  if (!posted) {
    return FailedPrecondition("tf_ps_ops is not initialised (or is shutting down): call "
                              "tf_ps_ops.init() before start_timeline / stop_timeline");
  }
  if (done.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    return DeadlineExceeded("the engine thread did not take the timeline change within 60 s");
  }
  return done.get();
}

}  // namespace

Status StartTimeline(const std::string& path, bool mark_cycles) {
  if (path.empty()) return InvalidArgument("start_timeline needs a file path");
  return OnTimeline([path, mark_cycles](Timeline& timeline, int rank) {
    Status written = timeline.Write();  // one already recording ends in its own file
    timeline.Open(path, rank);
    timeline.set_mark_cycles(mark_cycles);
    return written;
  });
}

Status StopTimeline() {
  return OnTimeline([](Timeline& timeline, int) {
    Status written = timeline.Write();
    timeline.Close();
    return written;
  });
}

Engine& Engine::Get() {
  static Engine* engine = new Engine();  // never destroyed: kernels may outlive statics
  return *engine;
}

Engine::~Engine() { Shutdown(); }

Status Engine::Init(const EngineOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  if (initialized_) return Status::Ok();
  Config config;
  TFPS_RETURN_IF_ERROR(LoadConfig(&config));
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return InvalidArgument("rank " + std::to_string(options.rank) + " is not within size " +
                           std::to_string(options.size));
  }
  SetLogRole("worker " + std::to_string(options.rank));
  auto loop = std::make_unique<Loop>(config, options.rank, options.size);
  ClusterView view;
  Status s;
  try {
    s = loop->Connect(options, &view);
  } catch (const zmq::error_t& e) {
    s = Unavailable(std::string("ZeroMQ error while connecting: ") + e.what());
  }
  if (!s.ok()) return s;
  rank_ = options.rank;
  size_ = options.size;
  num_servers_ = static_cast<int>(view.servers.size());
  LocalRankOf(view.worker_hosts, rank_, &local_rank_, &local_size_);
  loop->WatchStopSignal();  // before the thread starts: it polls the descriptor
  std::shared_ptr<Loop> running(std::move(loop));
  thread_ = std::thread([running] { running->RunOnLoop(); });
  {
    std::lock_guard<std::mutex> loop_lock(loop_mu_);
    loop_ = running;
  }
  {
    std::weak_ptr<Loop> weak = running;
    std::lock_guard<std::mutex> post_lock(TimelinePosterMutex());
    TimelinePoster() = [weak](std::function<void(Timeline&, int)> task) {
      std::shared_ptr<Loop> loop = weak.lock();
      return loop != nullptr && loop->PostTimelineTask(std::move(task));
    };
  }
  s = StartHierarchical(config, view);
  if (!s.ok()) {
    running->RequestStop();
    thread_.join();
    std::lock_guard<std::mutex> loop_lock(loop_mu_);
    loop_.reset();
    return s;
  }
  initialized_ = true;
  TFPS_LOG(Debug) << "initialised: rank " << rank_ << " of " << size_ << ", local rank "
                  << local_rank_ << " of " << local_size_ << ", " << num_servers_ << " server(s)";
  return Status::Ok();
}

void Engine::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!initialized_) return;
  initialized_ = false;
  std::shared_ptr<Loop> loop;
  {
    std::lock_guard<std::mutex> loop_lock(loop_mu_);
    loop.swap(loop_);
  }
  loop->RequestStop();
  thread_.join();
  UninstallStopSignal();
  std::shared_ptr<Hierarchical> hierarchical;
  {
    std::lock_guard<std::mutex> loop_lock(loop_mu_);
    hierarchical.swap(hierarchical_);
  }
  if (hierarchical) hierarchical->Shutdown();  // after the loop: its answers are all in
}

Status Engine::StartHierarchical(const Config& config, const ClusterView& view) {
  job_compresses_ = !config.compression.empty() && config.compression != "none";
  if (!config.hierarchical) return Status::Ok();
  if (!config.consistency.bsp()) {
    // A local sum waits for every local worker: a bsp step inside an ssp/asp job. The
    // stale rounds of the servers count each worker's own pushes, so every worker pushes.
    TFPS_LOG(Info) << "hierarchical aggregation is off under TFPS_CONSISTENCY="
                   << ConsistencyName(config.consistency) << " (it is a bsp step)";
    return Status::Ok();
  }
  std::map<std::string, std::vector<int>> hosts;  // every worker sees the same
  for (size_t r = 0; r < view.worker_hosts.size(); ++r) {
    hosts[view.worker_hosts[r]].push_back(static_cast<int>(r));
  }
  bool shared = false;
  for (const auto& kv : hosts) shared = shared || kv.second.size() > 1;
  if (!shared) return Status::Ok();  // one worker per host: nothing to sum locally
  // The leader's random token names the host's segments; one allgather (every worker
  // takes part, so all agree) carries it to its local workers.
  const std::vector<int> local = hosts[view.worker_hosts[rank_]];
  constexpr size_t kTokenChars = 32;
  auto token = std::make_shared<std::string>(kTokenChars, '0');
  if (local_rank_ == 0) TFPS_RETURN_IF_ERROR(ShmLocalReduce::NewToken(token.get()));
  auto got = std::make_shared<std::promise<std::pair<Status, std::string>>>();
  GatherRequest gather;
  gather.name = "tfps.hierarchical.token";
  gather.dtype = DType::kUInt8;
  gather.dims = {static_cast<int64_t>(kTokenChars)};
  gather.count = kTokenChars;
  gather.input = token->data();
  gather.input_holder = token;
  gather.done = [got, leader = local[0]](const Status& s, const std::vector<PeerTensor>& parts) {
    got->set_value({s, s.ok() ? std::string(static_cast<const char*>(parts[leader].data),
                                             kTokenChars)
                              : ""});
  };
  auto future = got->get_future();
  EnqueueGather(std::move(gather));
  if (future.wait_for(std::chrono::duration<double>(config.timeout_s * 1.2 + 1)) !=
      std::future_status::ready) {
    return DeadlineExceeded("the workers did not exchange the hierarchical aggregation's "
                            "token in time: does every worker set TFPS_HIERARCHICAL=1?");
  }
  auto [status, leader_token] = future.get();
  if (!status.ok()) {
    return status.WithPrefix("sharing the hierarchical aggregation's token (every worker "
                             "must set the same TFPS_HIERARCHICAL): ");
  }
  // Alone on its host (or on one with more workers than a push can list), a worker still
  // goes through Hierarchical, which cuts tensors into the same chunks everywhere.
  const bool alone = local.size() < 2 || local.size() > static_cast<size_t>(kMaxParams);
  if (local.size() > static_cast<size_t>(kMaxParams)) {
    TFPS_LOG(Warning) << local.size() << " workers on this host: hierarchical aggregation "
                      << "takes at most " << kMaxParams << "; this host's workers push alone";
  }
  if (!alone && leader_token.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return Internal("the local leader sent a malformed shared-memory token");
  }
  std::weak_ptr<Loop> weak;
  {
    std::lock_guard<std::mutex> loop_lock(loop_mu_);
    weak = loop_;
  }
  auto submit = [weak](PushPullRequest push) {
    std::shared_ptr<Loop> loop = weak.lock();
    if (!loop) {
      push.done(Aborted("tf_ps_ops was shut down before the local sum was pushed"));
      return;
    }
    push.enqueued = Clock::now();
    std::vector<Loop::Request> one;
    one.emplace_back(std::move(push));
    loop->Enqueue(std::move(one));
  };
  std::unique_ptr<LocalReduce> reduce;
  if (!alone) {
    reduce = std::make_unique<ShmLocalReduce>(leader_token, local, local_rank_,
                                              config.timeout_s);
  }
  auto hierarchical = std::make_shared<Hierarchical>(
      std::move(reduce), alone ? std::vector<int>{rank_} : local, submit);
  std::unique_ptr<LocalReduce> device_reduce;  // NCCL for GPU tensors (device_reduce.h)
  TFPS_RETURN_IF_ERROR(
      SetUpDeviceReduce(this, config, local, local_rank_, alone, &device_reduce));
  hierarchical->SetDeviceReduce(std::move(device_reduce));
  if (std::shared_ptr<Loop> loop = weak.lock()) {
    // A stopped local worker is alive to the shared memory's liveness check: the
    // scheduler's word that the job cannot go on must end the local waits too.
    std::weak_ptr<Hierarchical> weak_hierarchical = hierarchical;
    loop->OnJobFailed([weak_hierarchical](const Status& why) {
      if (auto h = weak_hierarchical.lock()) h->Fail(why);
    });
  }
  std::lock_guard<std::mutex> loop_lock(loop_mu_);
  hierarchical_ = std::move(hierarchical);
  TFPS_LOG(Debug) << "hierarchical aggregation: local rank " << local_rank_ << " of "
                  << local.size();
  return Status::Ok();
}

EngineStats Engine::stats() {
  std::lock_guard<std::mutex> lock(loop_mu_);
  return loop_ ? loop_->stats() : EngineStats();
}

bool Engine::EncodesOnDevice(const PushPullRequest& request, CodecSpec* spec) {
  std::lock_guard<std::mutex> lock(loop_mu_);
  if (!loop_ || (hierarchical_ && Hierarchical::Eligible(request, job_compresses_))) {
    return false;
  }
  *spec = loop_->ChooseCodec(request);
  // A PS-mode gradient is answered with the float32 parameter, which the hook cannot take.
  return spec->id != CodecId::kNone &&
         PushCodec::ReplyCodec(request, *spec) != CodecId::kNone;
}

namespace {

Status NotInitialised(const std::string& what, const std::string& name) {
  return FailedPrecondition("tf_ps_ops is not initialised: call tf_ps_ops.init() before " + what +
                            " of '" + name + "'");
}

}  // namespace

void Engine::Enqueue(PushPullRequest request) {
  std::vector<PushPullRequest> one;
  one.push_back(std::move(request));
  EnqueueAll(std::move(one));
}

void Engine::EnqueueAll(std::vector<PushPullRequest> requests) {
  std::shared_ptr<Loop> loop;
  std::shared_ptr<Hierarchical> hierarchical;
  {
    std::lock_guard<std::mutex> lock(loop_mu_);
    loop = loop_;
    hierarchical = hierarchical_;
  }
  std::vector<Loop::Request> queued;
  const auto now = Clock::now();
  for (PushPullRequest& request : requests) {
    request.enqueued = now;
    if (!loop) {
      request.done(NotInitialised("push_pull", request.name));
    } else if (hierarchical && Hierarchical::Eligible(request, job_compresses_)) {
      hierarchical->Enqueue(std::move(request));
    } else if (hierarchical && (request.flags & kFlagAbortRound) != 0 &&
               hierarchical->TakesAbort(request.name)) {
      hierarchical->EnqueueAbort(std::move(request));
    } else {
      queued.emplace_back(std::move(request));
    }
  }
  if (!queued.empty()) loop->Enqueue(std::move(queued));
}

void Engine::EnqueueGather(GatherRequest request) {
  std::shared_ptr<Loop> loop;
  {
    std::lock_guard<std::mutex> lock(loop_mu_);
    loop = loop_;
  }
  if (!loop) {
    request.done(NotInitialised("allgather", request.name), {});
    return;
  }
  std::vector<Loop::Request> one;
  one.emplace_back(std::move(request));
  loop->Enqueue(std::move(one));
}

}  // namespace tfps

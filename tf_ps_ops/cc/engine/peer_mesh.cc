#include "tf_ps_ops/cc/engine/peer_mesh.h"

#include <algorithm>

#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/common/metrics.h"
#include "tf_ps_ops/cc/common/stall.h"
#include "tf_ps_ops/cc/transport/auth.h"
#include "tf_ps_ops/cc/transport/zmq_util.h"

namespace tfps {

namespace {

// The mesh's connections carry no ZeroMQ heartbeats. A worker that vanishes is noticed by
// the scheduler (TFPS_HEARTBEAT_TIMEOUT), which tells every member; heartbeats on the mesh
// cost every worker 2(N-1) pings a second (docs/scale.md), and libzmq 4.3.4 aborts the
// process ("Assertion failed: !_io_error (src/stream_engine_base.cpp:331)") when a
// heartbeat falls due on a closed socket's lingering connection whose input had stopped
// before its peer hung up: at shutdown, where N workers close N-1 connections each at once
// (2 of 5 runs of 8 hosts x 8 workers, tests/scale).
void SetMeshOptions(zmq::socket_t& socket, const Config& config) {
  SetCommonOptions(socket, config);
  socket.set(zmq::sockopt::heartbeat_ivl, 0);
}

std::string RanksText(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text.empty() ? "(none)" : text;
}

bool TrailingDimsAgree(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.size() != b.size() || a.empty()) return a == b;
  return std::equal(a.begin() + 1, a.end(), b.begin() + 1);
}

}  // namespace

PeerMesh::PeerMesh(zmq::context_t& context, const Config& config, int rank, int size,
                   const LoopThread& loop_thread)
    : context_(context),
      loop_thread_(loop_thread),
      config_(config),
      rank_(rank),
      size_(size),
      incoming_(context, zmq::socket_type::router),
      member_fd_(size, -1),
      dead_(size),
      shut_down_(size, false),
      report_at_(size),
      queued_(size),
      queue_moved_(size),
      wanted_(size, false) {
  SetMeshOptions(incoming_, config_);
}

Status PeerMesh::Bind(int* port) {
  TFPS_RETURN_IF_ERROR(CheckBindAllowed(config_, "this worker's peer port"));
  try {
    BindTcp(incoming_, BindEndpoint(config_, 0, "this worker's peer port"));
  } catch (const zmq::error_t& e) {
    return Unavailable(std::string("cannot bind a port for peer traffic: ") + e.what());
  }
  *port = BoundPort(incoming_);
  // Until a peer speaks on a connection, what it may make ZeroMQ buffer is bounded: every
  // peer's first message is the empty probe its socket sends on connecting (Connect).
  incoming_monitor_ = std::make_unique<Monitor>(context_, incoming_, "peer-port",
                                                SilentConnections::kEvents);
  silent_ = std::make_unique<SilentConnections>(incoming_, "this worker's peer port");
  return Status::Ok();
}

Status PeerMesh::Connect(const std::vector<std::string>& peers) {
  if (static_cast<int>(peers.size()) != size_) {
    return Internal("the rendezvous listed " + std::to_string(peers.size()) + " peers for " +
                    std::to_string(size_) + " workers");
  }
  addresses_ = peers;
  outgoing_.resize(size_);
  monitors_.resize(size_);
  for (int r = 0; r < size_; ++r) {
    if (wanted_[r]) ConnectOnLoop(r);  // it spoke before the rendezvous ended here
  }
  return Status::Ok();
}

void PeerMesh::ConnectOnLoop(int r) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  if (r == rank_ || r < 0 || r >= size_) return;
  wanted_[r] = true;
  if (addresses_.empty() || outgoing_[r] || !dead_[r].empty()) return;
  auto socket = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
  SetMeshOptions(*socket, config_);
  socket->set(zmq::sockopt::sndhwm, kMeshSndHwm);  // the rest waits in queued_[r]
  PinToIoThread(*socket, r < rank_ ? r : r - 1, config_);  // the peers in turn
  socket->set(zmq::sockopt::routing_id, "w" + std::to_string(rank_));
  // An empty message first on the connection: the peer counts it as a member's at once,
  // before any large part arrives (SilentConnections bounds what others may hold).
  socket->set(zmq::sockopt::probe_router, 1);
  monitors_[r] = std::make_unique<Monitor>(context_, *socket, "peer-" + std::to_string(r),
                                           ZMQ_EVENT_DISCONNECTED);
  ConnectTcp(*socket, TcpAddressOf(addresses_[r]));
  outgoing_[r] = std::move(socket);
}

void PeerMesh::AppendPollItems(std::vector<zmq::pollitem_t>* items) {
  items->push_back({incoming_.handle(), 0, ZMQ_POLLIN, 0});
  if (incoming_monitor_) items->push_back({incoming_monitor_->socket().handle(), 0, ZMQ_POLLIN, 0});
  for (int r = 0; r < size_; ++r) {
    if (monitors_.empty() || !monitors_[r]) continue;
    const short out = queued_[r].empty() ? 0 : ZMQ_POLLOUT;  // room for what waits
    items->push_back({outgoing_[r]->handle(), 0, static_cast<short>(ZMQ_POLLIN | out), 0});
    items->push_back({monitors_[r]->socket().handle(), 0, ZMQ_POLLIN, 0});
  }
}

void PeerMesh::PollOnLoop() {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  std::vector<zmq::message_t> frames;
  while (RecvFrames(incoming_, &frames)) {
    if (silent_) silent_->OnMessage(frames);
    const int fd = silent_ && frames.size() > 1 ? SilentConnections::SourceFd(frames[1]) : -1;
    const int sender = OnPeerDataOnLoop(frames);
    // A peer has connected to us: connect back, so that our goodbye reaches it and its
    // death is seen on our connection too.
    if (sender >= 0 && !shut_down_[sender]) ConnectOnLoop(sender);
    if (!silent_) continue;
    if (sender >= 0 && fd >= 0) {
      member_fd_[sender] = fd;
      silent_->OnMember(fd);
    }
  }
  if (silent_) {
    int event = 0, value = 0;
    std::string address;
    while (incoming_monitor_->Read(&event, &value, &address)) {
      if (silent_->OnEvent(event, value)) continue;
      if (event != ZMQ_EVENT_DISCONNECTED) continue;
      for (int& fd : member_fd_) {
        if (fd == value) fd = -1;
      }
    }
    silent_->Tick([this](int fd) {
      return std::find(member_fd_.begin(), member_fd_.end(), fd) != member_fd_.end();
    });
  }
  for (int r = 0; r < size_; ++r) {
    if (monitors_.empty() || !monitors_[r]) continue;
    // Peers answer on this socket only to reject what we sent.
    while (RecvFrames(*outgoing_[r], &frames)) {
      const std::string why = frames.size() > 1 ? frames[1].to_string() : "malformed rejection";
      PeerDiedOnLoop(r, "rejected our data: " + why);
    }
    int event = 0, value = 0;
    std::string address;
    while (monitors_[r]->Read(&event, &value, &address)) {
      if (event == ZMQ_EVENT_DISCONNECTED) {
        PeerDiedOnLoop(r, "closed the connection (did the process die?)");
      }
    }
    if (!queued_[r].empty() && dead_[r].empty()) {
      const Status sent = FlushOnLoop(r);
      if (!sent.ok()) PeerDiedOnLoop(r, sent.message());
    }
  }
  StartDeferredOnLoop();
}

PeerMesh::Gather& PeerMesh::EntryOnLoop(const GatherId& id) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  auto it = gathers_.find(id);
  if (it != gathers_.end()) return it->second;
  Gather& g = gathers_[id];
  g.parts.resize(size_);
  g.dims.resize(size_);
  g.dtypes.assign(size_, 0);
  g.arrived.assign(size_, false);
  g.aborted.assign(size_, std::string());
  return g;
}

bool PeerMesh::Expects(const Gather& g, int peer) {
  if (!g.request.neighbours) return true;
  const std::vector<int>& from = g.request.recv_from;
  return std::find(from.begin(), from.end(), peer) != from.end();
}

void PeerMesh::StartOnLoop(GatherRequest request) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  // Back-pressure: over budget, a collective waits (its caller with it) until peers have
  // read enough; in order, behind those that wait already, so calls keep their numbers.
  if (!deferred_.empty() || queued_bytes_ > static_cast<uint64_t>(config_.peer_queue_bytes)) {
    deferred_.push_back(std::move(request));
    return;
  }
  StartNowOnLoop(std::move(request));
}

void PeerMesh::StartDeferredOnLoop() {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  while (!deferred_.empty() &&
         queued_bytes_ <= static_cast<uint64_t>(config_.peer_queue_bytes)) {
    GatherRequest request = std::move(deferred_.front());
    deferred_.pop_front();
    StartNowOnLoop(std::move(request));
  }
}

void PeerMesh::StartNowOnLoop(GatherRequest request) {
  const uint64_t key = KeyOfName(request.name);
  const GatherId id(key, ++calls_[request.name]);
  last_started_[key] = id.second;
  Gather& g = EntryOnLoop(id);
  g.started = true;
  g.since = Clock::now();
  g.request = std::move(request);
  g.arrived[rank_] = true;
  ++g.num_arrived;
  Status status = SendPartsOnLoop(g, key, id.second);
  auto it = gathers_.find(id);
  if (!status.ok()) {
    FinishOnLoop(it, status);
    return;
  }
  MaybeFinishOnLoop(it);
}

Status PeerMesh::SendAbortOnLoop(Gather& g, uint64_t key, uint64_t call) {
  const std::string why = g.request.abort.message().empty() ? std::string("refused its input")
                                                            : g.request.abort.message();
  g.aborted[rank_] = why;
  Head head;
  Header& h = head.header;
  h.type = static_cast<uint16_t>(MsgType::kPeerData);
  h.key = key;
  h.num_partitions = 1;
  h.step = call;
  h.dtype = static_cast<uint8_t>(DType::kUInt8);
  h.flags = kFlagAbort;
  h.sender = rank_;
  h.count = h.total_count = why.size();
  head.dims = {static_cast<int64_t>(why.size())};
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_ || !dead_[peer].empty()) continue;
    TFPS_RETURN_IF_ERROR(SendToPeerOnLoop(peer, head, zmq::message_t(why.data(), why.size()),
                                          g.request.name, call));
  }
  return Status::Ok();
}

Status PeerMesh::SendPartsOnLoop(Gather& g, uint64_t key, uint64_t call) {
  const GatherRequest& r = g.request;
  if (!r.abort.ok()) return SendAbortOnLoop(g, key, call);
  const size_t row_bytes = RowElements(r.dims) * DTypeSize(r.dtype);
  const bool alltoall = !r.send_rows.empty();
  std::vector<int64_t> first_row(size_ + 1, 0);  // alltoall: rank p gets rows [p, p + 1)
  for (int p = 0; alltoall && p < size_; ++p) first_row[p + 1] = first_row[p] + r.send_rows[p];
  auto dims_for = [&](int peer) {
    std::vector<int64_t> dims = r.dims;
    if (alltoall) dims[0] = r.send_rows[peer];
    return dims;
  };
  auto data_for = [&](int peer) {
    return static_cast<const char*>(r.input) + (alltoall ? first_row[peer] * row_bytes : 0);
  };
  g.dims[rank_] = dims_for(rank_);
  g.own = data_for(rank_);
  Head head;
  Header& h = head.header;
  h.type = static_cast<uint16_t>(MsgType::kPeerData);
  h.key = key;
  h.num_partitions = 1;
  h.step = call;
  h.dtype = static_cast<uint8_t>(r.dtype);
  h.sender = rank_;
  std::vector<int> targets = r.send_to;  // a neighbour exchange: only those
  if (!r.neighbours) {
    targets.clear();
    for (int peer = 0; peer < size_; ++peer) targets.push_back(peer);
  }
  for (int peer : targets) {
    if (peer == rank_ || peer < 0 || peer >= size_) continue;
    if (!dead_[peer].empty()) {
      return Unavailable("worker " + std::to_string(peer) + " (" + addresses_[peer] + ") " +
                         dead_[peer]);
    }
    head.dims = dims_for(peer);
    const uint64_t rows = head.dims.empty() ? 1 : static_cast<uint64_t>(head.dims[0]);
    h.count = alltoall ? rows * RowElements(r.dims) : r.count;
    h.total_count = h.count;
    const size_t bytes = h.count * DTypeSize(r.dtype);
    TFPS_RETURN_IF_ERROR(SendToPeerOnLoop(
        peer, head, ZeroCopyMessage(data_for(peer), bytes, r.input_holder), r.name, call));
  }
  return Status::Ok();
}

int PeerMesh::OnPeerDataOnLoop(std::vector<zmq::message_t>& frames) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  if (frames.size() == 2 && frames[1].size() == 0) {  // a peer's probe (Connect)
    const std::string identity = frames[0].to_string();
    for (int peer = 0; peer < size_; ++peer) {
      if (peer != rank_ && identity == "w" + std::to_string(peer)) return peer;
    }
    return -1;  // not a peer's: nothing to answer
  }
  Head head;
  const size_t payload = frames.size() == 3 ? frames[2].size() : 0;
  Status s = frames.size() < 2 || frames.size() > 3
                 ? InvalidArgument("a message of " + std::to_string(frames.size()) + " frames")
                 : DecodeHead(frames[1].data(), frames[1].size(), payload, &head);
  const Header& h = head.header;
  const bool bye = s.ok() && h.type == static_cast<uint16_t>(MsgType::kBye);
  if (s.ok() && ((h.type != static_cast<uint16_t>(MsgType::kPeerData) && !bye) || h.sender < 0 ||
                 h.sender >= size_ || h.sender == rank_ ||
                 frames[0].to_string() != "w" + std::to_string(h.sender))) {
    s = InvalidArgument("not peer data from a worker of this job");
  }
  // Peer data is always whole: a part standing for elements it does not carry would be
  // handed to the allgather's output as if it did.
  if (s.ok() && !bye && ((h.flags & kFlagNoData) != 0 || h.count != h.total_count)) {
    s = InvalidArgument("peer data that carries no data, or only part of its tensor");
  }
  if (s.ok()) s = CheckMessageSize(h, static_cast<uint64_t>(config_.max_message_bytes));
  if (!s.ok()) {
    const std::string identity = frames.empty() ? std::string() : frames[0].to_string();
    uint64_t suppressed = 0;
    if (!limiter_.Allow(identity, &suppressed)) return -1;  // a flood: counted, not answered
    TFPS_LOG(Warning) << "dropped a malformed peer message from '" << EscapeForLog(identity)
                      << "': " << s.message() << SuppressedNote(suppressed);
    if (!frames.empty()) {
      Header reject;
      reject.type = static_cast<uint16_t>(MsgType::kError);
      reject.status = static_cast<uint32_t>(s.code());
      reject.sender = rank_;
      (void)SendText(incoming_, frames[0].to_string(), reject, s.message());
    }
    return -1;
  }
  if (bye) {
    shut_down_[h.sender] = true;
    return h.sender;
  }
  bytes_received_ += payload;
  metrics::worker_bytes_received_worker.Add(payload);
  const GatherId id(h.key, h.step);
  const auto last = last_started_.find(h.key);
  if (last != last_started_.end() && h.step <= last->second && gathers_.count(id) == 0) {
    TFPS_LOG(Warning) << "worker " << h.sender << " sent call " << h.step
                      << " of a tensor after this worker had finished that call (a neighbour "
                         "exchange that did not expect it?); dropped";
    return h.sender;
  }
  Gather& g = EntryOnLoop(id);
  if (g.arrived[h.sender]) {
    TFPS_LOG(Warning) << "worker " << h.sender << " sent call " << h.step << " twice; dropped";
    return h.sender;
  }
  g.arrived[h.sender] = true;
  g.last_arrival = Clock::now();
  ++g.num_arrived;
  g.dims[h.sender] = head.dims;
  g.dtypes[h.sender] = h.dtype;  // checked against ours once our own request is known
  if ((h.flags & kFlagAbort) != 0) {
    g.aborted[h.sender] = frames.size() == 3 ? frames[2].to_string() : std::string("(no reason)");
    MaybeFinishOnLoop(gathers_.find(id));
    return h.sender;
  }
  if (frames.size() == 3) g.parts[h.sender] = std::move(frames[2]);
  MaybeFinishOnLoop(gathers_.find(id));
  return h.sender;
}

void PeerMesh::MaybeFinishOnLoop(std::map<GatherId, Gather>::iterator it) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  Gather& g = it->second;
  if (!g.started) return;
  const GatherRequest& r = g.request;
  if (r.neighbours) {
    for (int peer = 0; peer < size_; ++peer) {
      if (g.arrived[peer] && peer != rank_ && !Expects(g, peer)) {
        FinishOnLoop(it, InvalidArgument(
                             "worker " + std::to_string(peer) + " sent its tensor to worker " +
                             std::to_string(rank_) + ", which expected only workers' " +
                             RanksText(r.recv_from) + ": do all workers use the same peer "
                             "schedule (the same algorithm, step and size)?"));
        return;
      }
    }
    if (g.num_arrived < static_cast<int>(r.recv_from.size()) + 1) return;
  } else if (g.num_arrived < size_) {
    return;
  }
  if (!r.abort.ok()) {  // this worker's own refusal, with its own class
    const Status own = r.abort;  // a copy: FinishOnLoop moves the request out
    FinishOnLoop(it, own);
    return;
  }
  for (int peer = 0; peer < size_; ++peer) {
    if (g.aborted[peer].empty()) continue;
    FinishOnLoop(it, FailedPrecondition("worker " + std::to_string(peer) +
                                        " could not take part: " +
                                        EscapeForLog(g.aborted[peer], 1024)));
    return;
  }
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_ || !g.arrived[peer]) continue;
    if (g.dtypes[peer] != static_cast<uint8_t>(r.dtype) || !TrailingDimsAgree(g.dims[peer], r.dims)) {
      FinishOnLoop(it, FailedPrecondition(  // Horovod's class for a mismatch
                           "worker " + std::to_string(peer) + " sent " +
                           DescribeTensor(static_cast<DType>(g.dtypes[peer]), g.dims[peer]) +
                           ", worker " + std::to_string(rank_) + " has " +
                           DescribeTensor(r.dtype, r.dims) +
                           (r.neighbours ? ": every worker must pass the same shape and dtype"
                                         : ": the dtype and every dimension but the first "
                                           "must agree")));
      return;
    }
  }
  FinishOnLoop(it, Status::Ok());
}

void PeerMesh::FinishOnLoop(std::map<GatherId, Gather>::iterator it, const Status& status) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const uint64_t call = it->first.second;
  Gather g = std::move(it->second);
  gathers_.erase(it);
  std::vector<PeerTensor> parts(size_);
  if (status.ok()) {
    for (int peer = 0; peer < size_; ++peer) {
      if (!g.arrived[peer]) continue;
      parts[peer].dims = g.dims[peer];
      parts[peer].data = peer == rank_ ? g.own : g.parts[peer].data();
    }
  }
  const char* what = g.request.neighbours         ? "neighbour exchange"
                     : g.request.send_rows.empty() ? "allgather"
                                                   : "alltoall";
  const bool timed = status.ok() && g.started && timeline_ != nullptr && timeline_->enabled();
  const Clock::time_point answered = Clock::now();
  // Copied first: `done` may move out what the request holds.
  const std::string name = timed ? g.request.name : std::string();
  const uint64_t bytes = timed ? g.request.count * DTypeSize(g.request.dtype) : 0;
  g.request.done(status.WithPrefix(std::string(what) +
                                   " of tensor '" + g.request.name + "' (call " +
                                   std::to_string(call) + " on rank " + std::to_string(rank_) +
                                   "): "),
                 parts);
  if (timed) {
    // From this worker's start to its latest peer's part (the exchange and the wait for
    // the slowest peer), then the kernel's completion, as push_pull's "written".
    const Clock::time_point last = std::max(g.since, g.last_arrival);
    timeline_->Record(name, what, g.since, last, bytes);
    timeline_->Record(name, "written", answered, Clock::now(), bytes);
  }
}

void PeerMesh::PeerDiedOnLoop(int peer, const std::string& reason) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  if (!dead_[peer].empty()) return;
  DropQueueOnLoop(peer);  // nothing more reaches it; frees the budget for the others
  // A peer that said goodbye first has merely finished: no error unless we still need it.
  const std::string why = shut_down_[peer] ? "has shut down (called tf_ps_ops.shutdown())" : reason;
  dead_[peer] = why;
  const Status status = Unavailable("worker " + std::to_string(peer) + " (" + addresses_[peer] +
                                    ") " + why);
  bool needed = false;
  for (auto it = gathers_.begin(); it != gathers_.end();) {
    auto next = std::next(it);
    if (it->second.started && !it->second.arrived[peer] && Expects(it->second, peer)) {
      needed = true;
      FinishOnLoop(it, status);
    }
    it = next;
  }
  if (shut_down_[peer]) return;
  if (needed) {
    TFPS_LOG(Error) << status.message();
  } else {
    report_at_[peer] = Clock::now() + std::chrono::seconds(2);
  }
}

void PeerMesh::CheckDeadlinesOnLoop(Clock::time_point now) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  CheckQueuesOnLoop(now);
  for (int peer = 0; peer < static_cast<int>(report_at_.size()); ++peer) {
    if (report_at_[peer] == Clock::time_point() || report_at_[peer] > now) continue;
    report_at_[peer] = Clock::time_point();
    if (!shut_down_[peer]) {
      TFPS_LOG(Error) << "worker " << peer << " (" << addresses_[peer] << ") " << dead_[peer];
    }
  }
  for (auto it = gathers_.begin(); it != gathers_.end();) {
    auto next = std::next(it);
    Gather& g = it->second;
    // Dead peers failed it already (PeerDiedOnLoop): the missing ones are alive.
    const bool shutdown = g.started && StallShutdownDue(config_.stall, g.since, now);
    if (shutdown || (g.started && StallWarningDue(config_.stall, g.since, now,
                                                  &g.stall_warnings))) {
      std::vector<int> submitted, missing;
      for (int peer = 0; peer < size_; ++peer) {
        if (g.arrived[peer]) submitted.push_back(peer);
        else if (Expects(g, peer)) missing.push_back(peer);
      }
      const std::string what = "the peer exchange (allgather/alltoall) of tensor '" +
                               g.request.name + "' on rank " + std::to_string(rank_);
      if (shutdown) {
        FinishOnLoop(it, StallShutdownStatus(config_.stall, what, RankList(submitted),
                                             RankList(missing)));
      } else {
        metrics::stalls.Add();
        TFPS_LOG(Warning) << StallWarningText(what, RankList(submitted), RankList(missing),
                                              SecondsSince(g.since, now));
      }
    }
    it = next;
  }
  StartDeferredOnLoop();
}

void PeerMesh::FailAllOnLoop(const Status& status) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  for (auto it = gathers_.begin(); it != gathers_.end();) {
    auto next = std::next(it);
    if (it->second.started) FinishOnLoop(it, status);
    it = next;
  }
  while (!deferred_.empty()) {
    GatherRequest request = std::move(deferred_.front());
    deferred_.pop_front();
    request.done(status.WithPrefix("peer collective of tensor '" + request.name +
                                   "' (waiting to start on rank " + std::to_string(rank_) +
                                   "): "),
                 std::vector<PeerTensor>(size_));
  }
}

}  // namespace tfps

// Sending to peers: the per-peer queues behind each DEALER and their byte budget
// (peer_mesh.h), and closing the mesh (what is still owed to peers, the goodbyes).
#include <chrono>

#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/common/metrics.h"
#include "tf_ps_ops/cc/engine/peer_mesh.h"
#include "tf_ps_ops/cc/transport/zmq_util.h"

namespace tfps {

namespace {

// Sends [head][payload] if the DEALER takes it now; false, with nothing sent and `payload`
// kept, if it holds kMeshSndHwm messages already (ZeroMQ takes a multipart message whole
// or not at all).
bool TrySend(zmq::socket_t& socket, const std::string& head, zmq::message_t& payload) {
  if (!socket.send(zmq::buffer(head), zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
    return false;
  }
  return socket.send(payload, zmq::send_flags::dontwait).has_value();
}

}  // namespace

Status PeerMesh::SendToPeerOnLoop(int peer, const Head& head, zmq::message_t payload,
                                  const std::string& tensor, uint64_t call) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  ConnectOnLoop(peer);  // the first message to it
  if (!outgoing_[peer]) {
    return Unavailable("worker " + std::to_string(peer) + " (" + addresses_[peer] +
                       ") cannot be sent to: " + (dead_[peer].empty() ? "no address yet"
                                                                      : dead_[peer]));
  }
  std::deque<Outgoing>& queue = queued_[peer];
  if (queue.empty()) queue_moved_[peer] = Clock::now();
  queued_bytes_ += payload.size();
  queue.push_back(Outgoing{EncodeHead(head), std::move(payload), tensor, call});
  return FlushOnLoop(peer);
}

Status PeerMesh::FlushOnLoop(int peer) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  std::deque<Outgoing>& queue = queued_[peer];
  try {
    while (!queue.empty()) {
      Outgoing& m = queue.front();
      const size_t bytes = m.payload.size();
      if (!TrySend(*outgoing_[peer], m.head, m.payload)) return Status::Ok();  // no room yet
      queued_bytes_ -= bytes;
      bytes_sent_ += bytes;
      metrics::worker_bytes_sent_worker.Add(bytes);
      queue.pop_front();
      queue_moved_[peer] = Clock::now();
    }
  } catch (const zmq::error_t& e) {
    return Unavailable("worker " + std::to_string(peer) + " (" + addresses_[peer] +
                       "): sending peer data failed: " + e.what());
  }
  return Status::Ok();
}

void PeerMesh::DropQueueOnLoop(int peer) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  for (const Outgoing& m : queued_[peer]) queued_bytes_ -= m.payload.size();
  queued_[peer].clear();
}

void PeerMesh::CheckQueuesOnLoop(Clock::time_point now) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const auto limit = std::chrono::duration<double>(config_.timeout_s);
  for (int peer = 0; peer < size_; ++peer) {
    const std::deque<Outgoing>& queue = queued_[peer];
    if (queue.empty() || now - queue_moved_[peer] < limit) continue;
    uint64_t bytes = 0;
    for (const Outgoing& m : queue) bytes += m.payload.size();
    PeerDiedOnLoop(peer, "has taken none of the peer data this worker sends it for " +
                             std::to_string(static_cast<int>(SecondsSince(queue_moved_[peer], now))) +
                             " s (TFPS_TIMEOUT): " + std::to_string(queue.size()) +
                             " messages (" + std::to_string(bytes) +
                             " payload bytes) wait for it, the oldest for tensor '" +
                             queue.front().tensor + "' (call " +
                             std::to_string(queue.front().call) +
                             "); is that process stopped (SIGSTOP) or its engine thread stuck?");
  }
}

void PeerMesh::CloseOnLoop() {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  DrainOnLoop();
  Head bye;
  bye.header.type = static_cast<uint16_t>(MsgType::kBye);
  bye.header.sender = rank_;
  for (int peer = 0; peer < size_; ++peer) {
    // DrainOnLoop has emptied every queue (handed over or dropped), so the goodbye is last.
    if (outgoing_.size() > static_cast<size_t>(peer) && outgoing_[peer] && dead_[peer].empty()) {
      // Never blocks: a peer that does not read learns from the closed connection instead.
      zmq::message_t none;
      try {
        (void)TrySend(*outgoing_[peer], EncodeHead(bye), none);
      } catch (const zmq::error_t&) {
      }
    }
  }
  AwaitGoodbyesOnLoop();
  monitors_.clear();
  silent_.reset();
  incoming_monitor_.reset();
  for (int peer = 0; peer < static_cast<int>(outgoing_.size()); ++peer) {
    if (!outgoing_[peer]) continue;
    // A peer that said goodbye or died reads nothing more: closing without lingering.
    // Otherwise ZeroMQ would hold the close for the linger (2 s), redialling a connection
    // the peer has just closed, whenever both ends close at the same moment.
    if (shut_down_[peer] || !dead_[peer].empty()) outgoing_[peer]->set(zmq::sockopt::linger, 0);
    outgoing_[peer]->close();
  }
  incoming_.close();
}

void PeerMesh::DrainOnLoop() {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  // What finished collectives still owe peers that are alive and have not left (a peer
  // that finished its own part of a gather before reading ours): as long as the sockets'
  // linger would have waited for it.
  const auto until = Clock::now() + std::chrono::milliseconds(kSocketLingerMs);
  std::vector<zmq::pollitem_t> items;
  std::vector<int> peers;
  for (;;) {
    items.clear();
    peers.clear();
    for (int peer = 0; peer < size_; ++peer) {
      if (queued_[peer].empty()) continue;
      if (shut_down_[peer] || !dead_[peer].empty() || !outgoing_[peer]) {
        DropQueueOnLoop(peer);
        continue;
      }
      items.push_back({outgoing_[peer]->handle(), 0, ZMQ_POLLOUT, 0});
      peers.push_back(peer);
    }
    if (items.empty() || Clock::now() >= until) break;
    Poll(items.data(), items.size(), 20);
    for (size_t i = 0; i < items.size(); ++i) {
      if ((items[i].revents & ZMQ_POLLOUT) == 0) continue;
      if (!FlushOnLoop(peers[i]).ok()) DropQueueOnLoop(peers[i]);
    }
    ReadGoodbyesOnLoop();
  }
  for (int peer = 0; peer < size_; ++peer) {
    if (queued_[peer].empty()) continue;
    TFPS_LOG(Warning) << "shutting down with " << queued_[peer].size()
                      << " peer message(s) that worker " << peer << " (" << addresses_[peer]
                      << ") has not taken in " << kSocketLingerMs / 1000
                      << " s, the oldest for tensor '" << queued_[peer].front().tensor
                      << "' (call " << queued_[peer].front().call
                      << "): that worker's collective will fail naming this one";
    DropQueueOnLoop(peer);
  }
}

void PeerMesh::AwaitGoodbyesOnLoop() {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  // Peers closing at the same moment say goodbye within milliseconds; waiting that long
  // for theirs lets both ends close without lingering. A peer still working is not
  // waited for beyond kGoodbyeWaitMs.
  const auto until = Clock::now() + std::chrono::milliseconds(kGoodbyeWaitMs);
  for (;;) {
    bool waiting = false;
    for (int peer = 0; peer < static_cast<int>(outgoing_.size()); ++peer) {
      waiting = waiting || (outgoing_[peer] && !shut_down_[peer] && dead_[peer].empty());
    }
    if (!waiting || Clock::now() >= until) return;
    zmq::pollitem_t item{incoming_.handle(), 0, ZMQ_POLLIN, 0};
    Poll(&item, 1, 10);
    ReadGoodbyesOnLoop();
  }
}

void PeerMesh::ReadGoodbyesOnLoop() {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  // Everything that came is read as usual (a goodbye marks its sender); nothing waits on
  // it any more, since FailAllOnLoop has ended every started collective.
  std::vector<zmq::message_t> frames;
  while (RecvFrames(incoming_, &frames)) (void)OnPeerDataOnLoop(frames);
}

}  // namespace tfps

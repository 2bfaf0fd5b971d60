// Worker-to-worker allgather over direct connections (no server in the path): each worker
// sends its tensor to every peer once and receives every peer's, which is what Sufficient
// Factor Broadcasting needs (each worker's factors u, v to all others) and what Horovod's
// allgather means. Owned and driven by the engine thread (methods ...OnLoop).
//
// Every worker binds a ROUTER for incoming peer data (its port travels through the
// rendezvous) and connects a DEALER to another worker's ROUTER when it first has something
// to send it (an allgather: to every peer; a neighbour exchange: to those it names), or
// when that peer's first message arrives (connecting back, so that goodbyes and deaths
// are seen both ways). A job that only push_pulls holds no mesh. A peer's part may arrive
// before this worker asks for the same name and call: it waits in the table (a ROUTER
// takes messages from any DEALER that connects, whether or not ours to it exists).
//
// Sends never block the engine: each DEALER queues at most kMeshSndHwm messages, and what
// it cannot take yet waits in the mesh's own queue for that peer, all peers' queues
// together bounded by TFPS_PEER_QUEUE_BYTES (beyond it new collectives wait to start). A
// peer whose queue does not move for TFPS_TIMEOUT counts as dead, named in the error.
#ifndef TFPS_CC_ENGINE_PEER_MESH_H_
#define TFPS_CC_ENGINE_PEER_MESH_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "tf_ps_ops/cc/common/config.h"
#include "tf_ps_ops/cc/common/loop_thread.h"
#include "tf_ps_ops/cc/common/rate_limit.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/engine/timeline.h"
#include "tf_ps_ops/cc/transport/connection_limits.h"
#include "tf_ps_ops/cc/transport/zmq_util.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

// One worker's part as received: valid only during the `done` callback.
struct PeerTensor {
  const void* data = nullptr;
  std::vector<int64_t> dims;
};

struct GatherRequest {
  std::string name;  // identical on every worker
  DType dtype = DType::kInvalid;
  std::vector<int64_t> dims;  // all but the first must agree across workers
  uint64_t count = 0;
  const void* input = nullptr;
  std::shared_ptr<void> input_holder;  // keeps `input` alive until ZeroMQ has sent it
  // Empty: an allgather (every peer gets all of `input`). Otherwise an alltoall: one entry
  // per rank, the rows of `input` (in order, from row 0) that go to that rank; each peer's
  // part is then the rows it sent to this worker. The kernel checks the sum fits dims[0].
  std::vector<int64_t> send_rows;
  // Not OK: this worker refused its own input. It still takes part, telling every peer why
  // (kFlagAbort) instead of sending data, so that they fail this call at once rather than
  // wait for it; `done` gets this status.
  Status abort;
  // A neighbour exchange (kernels/neighbour_ops.cc) instead of an allgather: send only to
  // `send_to`, wait only for `recv_from` (ranks other than this one, no repeats; checked by
  // the caller). Every worker's call of the same name still counts as one call.
  bool neighbours = false;
  std::vector<int> send_to;
  std::vector<int> recv_from;
  // Called once on the engine thread with every worker's part in rank order (own included;
  // for a neighbour exchange only those of `recv_from` and our own are set).
  std::function<void(const Status&, const std::vector<PeerTensor>&)> done;
};

// Messages each mesh DEALER holds for its peer before the mesh keeps the rest itself: few,
// since the mesh's own queue counts bytes against one budget for all peers, where ZeroMQ's
// counts messages per peer (kSocketHwm would be 100,000 per peer, times N - 1).
constexpr int kMeshSndHwm = 8;
// How long closing the mesh waits for the goodbyes of connected peers (peers that close
// at the same moment send theirs within milliseconds).
constexpr int kGoodbyeWaitMs = 200;

class PeerMesh {
 public:
  using Clock = std::chrono::steady_clock;

  // `loop_thread`: the engine's, which drives the mesh (the ...OnLoop methods check it).
  PeerMesh(zmq::context_t& context, const Config& config, int rank, int size,
           const LoopThread& loop_thread);

  // Binds the incoming socket; call before the rendezvous, which publishes the port.
  Status Bind(int* port);
  // Learns every worker's peer port ("host:port" by rank, from the rendezvous); connects
  // to a peer on first use (ConnectOnLoop), not here.
  Status Connect(const std::vector<std::string>& peers);

  void AppendPollItems(std::vector<zmq::pollitem_t>* items);
  void PollOnLoop();  // reads whatever its sockets hold
  // How long the engine's poll may wait: `normal`, or less while connections to the peer
  // port that no peer has spoken on yet are open (SilentConnections).
  int PollTimeoutMs(int normal) const { return silent_ ? silent_->PollTimeoutMs(normal) : normal; }
  void StartOnLoop(GatherRequest request);
  void CheckDeadlinesOnLoop(Clock::time_point now);
  void FailAllOnLoop(const Status& status);
  void CloseOnLoop();
  // Where finished collectives are recorded (TFPS_TIMELINE): the engine thread's timeline,
  // which outlives the mesh's calls; null or disabled records nothing.
  void set_timeline(Timeline* timeline) { timeline_ = timeline; }

  // Payload bytes handed to ZeroMQ for peers (any thread); not those still queued here.
  uint64_t bytes_sent() const { return bytes_sent_.load(); }
  // Payload bytes of well-formed peer data that arrived (any thread).
  uint64_t bytes_received() const { return bytes_received_.load(); }

 private:
  struct Gather {
    bool started = false;
    GatherRequest request;
    std::vector<zmq::message_t> parts;        // by rank
    std::vector<std::vector<int64_t>> dims;   // by rank
    std::vector<uint8_t> dtypes;              // by rank, as each peer claimed
    std::vector<bool> arrived;
    std::vector<std::string> aborted;         // by rank: why it could not take part
    const void* own = nullptr;                // this worker's own part (alltoall: a slice)
    int num_arrived = 0;
    Clock::time_point since;  // started here: stall warnings, TFPS_STALL_SHUTDOWN
    Clock::time_point last_arrival;  // the latest peer's part (the timeline's wait)
    int stall_warnings = 0;
  };
  using GatherId = std::pair<uint64_t, uint64_t>;  // key, call
  // A message to one peer that its DEALER could not take yet.
  struct Outgoing {
    std::string head;  // encoded
    zmq::message_t payload;
    std::string tensor;
    uint64_t call = 0;
  };

  void StartNowOnLoop(GatherRequest request);
  // Connects a DEALER to `peer` unless one is there; before Connect, once it is called.
  void ConnectOnLoop(int peer);
  // Starts the collectives that waited for the queues to shrink, while they stay in budget.
  void StartDeferredOnLoop();
  // Sends to `peer`, or queues behind what waits for it already.
  Status SendToPeerOnLoop(int peer, const Head& head, zmq::message_t payload,
                          const std::string& tensor, uint64_t call);
  // Hands what waits for `peer` to its DEALER while it takes messages.
  Status FlushOnLoop(int peer);
  void DropQueueOnLoop(int peer);
  void CheckQueuesOnLoop(Clock::time_point now);  // TFPS_TIMEOUT for unread queues
  // At close: hands over what waits for live peers, for at most the linger; then waits up
  // to kGoodbyeWaitMs for the goodbyes of connected peers; reads what arrives meanwhile.
  void DrainOnLoop();
  void AwaitGoodbyesOnLoop();
  void ReadGoodbyesOnLoop();

  // Sends this worker's part to every peer (all of it, or their rows for an alltoall).
  Status SendPartsOnLoop(Gather& g, uint64_t key, uint64_t call);
  Status SendAbortOnLoop(Gather& g, uint64_t key, uint64_t call);
  // Returns the sender's rank when the message was a peer's (its connection is a member's
  // then), or -1.
  int OnPeerDataOnLoop(std::vector<zmq::message_t>& frames);
  void MaybeFinishOnLoop(std::map<GatherId, Gather>::iterator it);
  void FinishOnLoop(std::map<GatherId, Gather>::iterator it, const Status& status);
  void PeerDiedOnLoop(int peer, const std::string& reason);
  Gather& EntryOnLoop(const GatherId& id);
  static bool Expects(const Gather& g, int peer);  // a started gather waits for `peer`

  zmq::context_t& context_;
  const LoopThread& loop_thread_;
  const Config config_;
  const int rank_;
  const int size_;
  zmq::socket_t incoming_;
  // The peer port's connections that no peer has spoken on yet: what they may hold
  // (connection_limits.h). Set by Bind; declared after incoming_, destroyed before it.
  std::unique_ptr<Monitor> incoming_monitor_;
  std::unique_ptr<SilentConnections> silent_;
  std::vector<int> member_fd_;  // by rank: the descriptor its messages come from, or -1
  PeerRateLimiter limiter_;  // what misbehaving peers make us log and answer
  std::vector<std::unique_ptr<zmq::socket_t>> outgoing_;  // by rank; null for self
  std::vector<std::unique_ptr<Monitor>> monitors_;
  std::vector<std::string> addresses_;
  std::vector<std::string> dead_;  // why a peer is unusable, by rank
  std::vector<bool> shut_down_;    // the peer said goodbye
  // A peer that disconnected while nothing waited for it is reported only if its goodbye
  // (which travels on another connection and can come later) is not here by then.
  std::vector<Clock::time_point> report_at_;
  std::unordered_map<std::string, uint64_t> calls_;
  // The last call of each key this worker started: a part for an earlier call whose entry
  // is gone (finished) came late or was never expected, and would otherwise wait forever.
  std::unordered_map<uint64_t, uint64_t> last_started_;
  std::map<GatherId, Gather> gathers_;
  std::vector<std::deque<Outgoing>> queued_;  // by rank: what its DEALER could not take yet
  std::vector<Clock::time_point> queue_moved_;  // by rank: when its queue last moved
  uint64_t queued_bytes_ = 0;                   // payload bytes in queued_, all peers
  std::deque<GatherRequest> deferred_;          // not started: queued_bytes_ over budget
  std::vector<bool> wanted_;  // by rank: to be connected (ConnectOnLoop) once Connect has run
  std::atomic<uint64_t> bytes_sent_{0};  // read by stats() on other threads
  std::atomic<uint64_t> bytes_received_{0};
  Timeline* timeline_ = nullptr;
};

}  // namespace tfps

#endif  // TFPS_CC_ENGINE_PEER_MESH_H_

// The engine thread (Engine::Loop, engine.h): its state and its jobs, one file per job.
//
//   loop.cc           the loop itself: run, enqueue, wake, stop
//   server_links.cc   the links to the servers: join, notices, a server's death, goodbye, the
//                     shared-memory send path to a colocated server (TFPS_SHM_SERVER)
//   send_queue.cc     the send queue: ready partitions, credit, fusion batches, sending one
//   calls.cc          the calls in flight: start, finish, deadlines
//   call_replies.cc   the servers' replies: shared-memory, error and data replies
//   call_encoding.cc  a call's sparse rows and its partitions encoded on the GPU
//
// One class, because the jobs share the engine thread's tables (the calls, the partitions
// awaiting an answer, the servers): each job is the set of methods in its file. Every
// ...OnLoop method runs on the engine thread only and checks it (common/loop_thread.h).
// Included by the engine's own files only.
#ifndef TFPS_CC_ENGINE_LOOP_H_
#define TFPS_CC_ENGINE_LOOP_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

#include <zmq.hpp>

#include "tf_ps_ops/cc/common/loop_thread.h"
#include "tf_ps_ops/cc/engine/engine.h"
#include "tf_ps_ops/cc/engine/partition.h"
#include "tf_ps_ops/cc/engine/push_codec.h"
#include "tf_ps_ops/cc/engine/timeline.h"
#include "tf_ps_ops/cc/transport/auth.h"
#include "tf_ps_ops/cc/transport/shm_segment.h"
#include "tf_ps_ops/cc/transport/zmq_util.h"

namespace tfps {

class Engine::Loop {
 public:
  using Clock = std::chrono::steady_clock;
  using Request = std::variant<PushPullRequest, GatherRequest>;
  using TimelineTask = std::function<void(Timeline&, int rank)>;

  Loop(const Config& config, int rank, int size);
  ~Loop();

  // --- loop.cc: any thread but RunOnLoop.
  void RunOnLoop();
  void Enqueue(std::vector<Request> requests);
  // Runs `task` on the engine thread with the timeline (timeline_control.h); false when
  // the loop is stopping.
  bool PostTimelineTask(TimelineTask task);
  void RequestStop();
  void WatchStopSignal();
  // The codec the engine would push `r` with (PushCodec::Choose; any thread: it reads only
  // what Init set).
  CodecSpec ChooseCodec(const PushPullRequest& r) const { return codec_.Choose(r); }
  // Called (on the engine thread) when a member's failure ends the job; at once if it
  // already has. Any thread.
  void OnJobFailed(std::function<void(const Status&)> listener);
  EngineStats stats() const;
  // The send queue's fusion threshold and scheduling credit (TFPS_FUSION_BYTES,
  // TFPS_SCHEDULING_CREDIT), changed while it runs (Engine::SetTuning checks them): both
  // decide only when this worker's partitions leave, never what a server computes. Any
  // thread; the next turn of the loop sends by them.
  void SetTuning(int64_t fusion_bytes, int64_t scheduling_credit) {
    fusion_bytes_.store(fusion_bytes, std::memory_order_relaxed);
    scheduling_credit_.store(scheduling_credit, std::memory_order_relaxed);
    Wake();
  }
  int64_t fusion_bytes() const { return fusion_bytes_.load(std::memory_order_relaxed); }
  // How long a fusion batch may wait for more partitions (TFPS_CYCLE_US), changed while
  // it runs (Engine::SetCycle checks it). Any thread.
  void SetCycle(int64_t us) {
    cycle_us_.store(us, std::memory_order_relaxed);
    Wake();
  }
  int64_t cycle_us() const { return cycle_us_.load(std::memory_order_relaxed); }
  int64_t max_message_bytes() const { return config_.max_message_bytes; }
  int64_t scheduling_credit() const {
    return scheduling_credit_.load(std::memory_order_relaxed);
  }

  // --- server_links.cc: rendezvous, connect to every server and check its hello; on the
  // thread in Engine::Init, before RunOnLoop.
  Status Connect(const EngineOptions& options, ClusterView* view);

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
  // One call in flight (a push_pull, a join, an abort).
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
  struct ServerBatch {
    Batch batch;
    std::vector<uint64_t> op_ids;  // the ops its partitions belong to
    Clock::time_point opened;      // when its first partition joined (TFPS_CYCLE_US)
    // Drops what waits unsent (its calls have failed: a dead server, the shutdown).
    void Clear() {
      batch = Batch();
      op_ids.clear();
    }
  };

  // --- loop.cc: one turn of the loop.
  // Waits for a socket, the queue's eventfd, a batch's cycle or 100 ms; notes which of
  // the servers' and the scheduler's sockets have something to read (polled_).
  void PollOnLoop();
  // Takes what other threads queued; returns whether the loop is asked to stop.
  bool TakeQueueOnLoop(std::deque<Request>* requests, std::vector<TimelineTask>* tasks);
  // Starts the requests taken, or fails them when the job has failed.
  void StartQueuedOnLoop(std::deque<Request>& requests, const Status& failed);
  void ReadServersOnLoop();  // the servers' replies and their connections' ends
  void EndOnLoop();          // fails what is in flight, says goodbye, writes the timeline
  void Wake();

  // --- server_links.cc: the servers and the scheduler.
  // Connect() after the rendezvous: servers' hellos. A failure here is told to the others.
  Status JoinClusterOnLoop(const EngineOptions& options, ClusterView* view);
  // Opens server i's socket, with its monitor, and says hello.
  Status OpenServerOnLoop(size_t i);
  // Waits until every server has answered the hello (in TFPS_TIMEOUT).
  Status AwaitHellosOnLoop();
  // Server i never answered our hello: why, for the error. A probe connection under an
  // identity of its own tells an unreachable server from one where another connection
  // already holds this worker's identity.
  std::string WhyNoHelloOnLoop(size_t i);
  // A message from server i during the join: *answered becomes true with its hello's
  // answer (the first one takes the shared-memory offer).
  Status OnHelloReplyOnLoop(size_t i, std::vector<zmq::message_t>& frames, bool* answered);
  // Reads the scheduler's notices (cluster/notice.h): warnings are logged; a failure of
  // another member sets job_failed_ and fails everything in flight. Returns job_failed_.
  Status ReadNoticesOnLoop();
  // Another member's failure ends the job: fails everything in flight, tells the listeners.
  void FailJobOnLoop(const Status& why);
  // SIGTERM arrived (stop_signal.h): tells the scheduler, then lets the signal end us.
  void StoppedBySignalOnLoop();
  // The server's connection ended (or it cannot be used): its calls fail, and later ones.
  void ServerDiedOnLoop(int server, const std::string& why);
  void SayGoodbyeOnLoop();
  std::string Describe(int server) const {
    return "server " + std::to_string(server) + " (" + servers_[server].address + ")";
  }
  // The shared-memory send path (TFPS_SHM_SERVER). The partition's segment with the server,
  // or nullptr when it must take the socket (busy with an earlier step's push, refused).
  ShmSegment* ShmRouteOnLoop(const Op& op, uint32_t index);
  // The partition's segment with the server (created on first use), nullptr with *status
  // on failure.
  ShmSegment* ShmOfOnLoop(int server, const Op& op, uint32_t index, Status* status);
  // The same, or nullptr when it cannot be reserved: that partition then takes the socket.
  ShmSegment* ShmOrSocketOnLoop(int server, const Op& op, uint32_t index);
  // A reply frees the segment its push went through; returns whether it was that push's.
  bool ReleaseShmOnLoop(int server, const Header& h);
  // The server refused a partition's segment (kFlagShmRefused: nothing counted): that
  // partition goes over the socket, now and for the rest of the job.
  void ResendOverSocketOnLoop(int server, uint64_t op_id, Op& op, uint32_t index,
                              const std::string& why);

  // --- send_queue.cc: partitions leave as the scheduling credit allows.
  // Sends queued partitions while the scheduling credit allows; small ones for the same
  // server leave together as one batch (TFPS_FUSION_BYTES).
  void PumpOnLoop();
  // Sends the partition, or adds it to its server's batch.
  Status SendPartOnLoop(uint64_t op_id, Op& op, uint32_t index);
  // The head of the partition's push (or join).
  Head PartHeadOnLoop(const Op& op, uint32_t index, bool no_data) const;
  // The partition's payload (`bytes` of data): encoded, copied into `segment` (the head
  // then says so), or the tensor's bytes in place. *wire_bytes: what it weighs as sent.
  Status PartPayloadOnLoop(Op& op, uint32_t index, ShmSegment* segment, uint64_t bytes,
                           Head* head, zmq::message_t* payload, uint64_t* wire_bytes);
  void FlushOnLoop(int server);  // sends the server's batch, failing its ops on error
  // Sends the batches whose cycle (TFPS_CYCLE_US) is over, or every batch with no cycle;
  // the rest wait, and the cycle timer wakes the loop when the first of them is due.
  void FlushDueOnLoop();
  uint64_t PartBytes(const Op& op, uint32_t index) const;
  // What the partition weighs on the wire: its encoded size when compressed, so that the
  // scheduling credit and fusion count what is sent (docs/compression.md).
  uint64_t WireBytes(const Op& op, uint32_t index) const;

  // --- calls.cc: a call from start to finish.
  void StartOnLoop(PushPullRequest request);
  // Cuts op.request into op.parts (a join, an abort are cut their own way).
  void PartitionOnLoop(Op& op);
  void FinishOnLoop(uint64_t op_id, const Status& status);
  // The timeline's spans of a finished call (TFPS_TIMELINE).
  void RecordFinishedOnLoop(const Op& op, uint64_t bytes, Clock::time_point answered);
  void CheckDeadlinesOnLoop();

  // --- call_replies.cc
  void OnMessageOnLoop(int server, std::vector<zmq::message_t>& frames);
  void OnReplyOnLoop(int server, zmq::message_t& head_frame, zmq::message_t* payload);
  // A reply for a partition the call still waits for (not an acknowledgement).
  void OnAnswerOnLoop(int server, uint64_t op_id, Op& op, const Head& head,
                      zmq::message_t* payload, bool pushed_in_shm);
  // An error: fails the call, or resends a push the server could not read from shared memory.
  void OnErrorReplyOnLoop(int server, uint64_t op_id, Op& op, const Header& h,
                          const zmq::message_t* payload, bool pushed_in_shm);
  // A dense partition's sum: checked, decoded and written into the output. The error
  // names the server.
  Status OnDataReplyOnLoop(int server, Op& op, const Header& h, zmq::message_t* payload);

  // --- call_encoding.cc
  Status PrepareSparseOnLoop(Op& op) const;
  zmq::message_t SparsePayload(const Op& op, uint32_t index) const;
  Status OnSparseReplyOnLoop(Op& op, const Header& h, const zmq::message_t& payload);
  // request.device_codec: every partition encoded on the GPU, into op.device_encoded.
  Status EncodeOnDeviceOnLoop(Op& op);

  int stop_fd_ = -1;
  const Config config_;
  const int rank_;
  zmq::context_t context_;
  std::unique_ptr<ZapHandler> zap_;  // with a job key: admits only its holders (peer port)

  // The links to the servers (server_links.cc).
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

  // The queue (loop.cc): other threads' requests.
  std::mutex queue_mu_;
  std::deque<Request> queue_;  // guarded by queue_mu_
  bool stopping_ = false;              // guarded by queue_mu_
  std::vector<TimelineTask> timeline_tasks_;  // guarded by queue_mu_
  int wake_fd_ = -1;

  // The calls in flight (calls.cc), engine thread only.
  std::unordered_map<std::string, uint64_t> steps_;  // per-name call count
  // Per name, how many partitions its last push had: where an abort of the name goes.
  std::unordered_map<std::string, uint32_t> partitions_;
  uint64_t next_op_id_ = 1;
  std::map<uint64_t, Op> ops_;  // by id: ids grow with time, so deadlines are in order
  std::map<PartId, uint64_t> pending_;  // partition sent, answer awaited -> op id

  // The send queue (send_queue.cc), engine thread only.
  std::set<ReadyPart> ready_;           // partitions waiting for credit
  uint64_t in_flight_bytes_ = 0;
  std::vector<ServerBatch> batches_;  // per server: partitions to send together
  // A timerfd that wakes the loop when a waiting batch is due (TFPS_CYCLE_US), and when
  // it is set to (max: not set, or it has fired).
  int cycle_fd_ = -1;
  Clock::time_point cycle_armed_ = Clock::time_point::max();
  // What the last poll found readable: the turn reads only those sockets (each read of an
  // empty socket costs libzmq two system calls). A message that arrives later in the
  // turn is found by the next poll.
  struct Polled {
    std::vector<char> server, monitor;  // per server
    bool scheduler = false;
  } polled_;
  std::atomic<int64_t> fusion_bytes_{0}, scheduling_credit_{0};  // SetTuning; from config_
  std::atomic<int64_t> cycle_us_{0};                             // SetCycle; from config_

  Timeline timeline_;
  PushCodec codec_;
  std::atomic<uint64_t> bytes_sent_{0}, bytes_received_{0}, messages_sent_{0},
      parts_sent_{0}, batches_sent_{0}, batches_received_{0}, shm_parts_sent_{0};
};

}  // namespace tfps

#endif  // TFPS_CC_ENGINE_LOOP_H_

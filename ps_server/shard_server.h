// A parameter server process: one I/O thread owns the ROUTER socket (ZeroMQ sockets are
// single-threaded); summation threads own disjoint sets of keys (a KeyStore each).
//
//   I/O thread  --(push, by hash of key+partition)-->  summation thread k  (inbox k)
//   summation threads  --(replies)-->  outbox  --(eventfd wakes)-->  I/O thread
//
// Small replies for the same worker that are in the outbox together leave as one batch
// (TFPS_FUSION_BYTES); workers may batch their pushes the same way (wire/message.h).
//
// Payloads move between threads as reference-counted buffers (buffer.h) over the bytes
// ZeroMQ received: never copied.
#ifndef TFPS_PS_SERVER_SHARD_SERVER_H_
#define TFPS_PS_SERVER_SHARD_SERVER_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "ps_server/checkpoint.h"
#include "ps_server/key_store.h"
#include "ps_server/push_budget.h"
#include "ps_server/shm_peers.h"
#include "ps_server/thread_watch.h"
#include "tf_ps_ops/cc/common/config.h"
#include "tf_ps_ops/cc/common/rate_limit.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/transport/auth.h"
#include "tf_ps_ops/cc/transport/zmq_util.h"

namespace tfps {

class ShardServer {
 public:
  ShardServer(int num_workers, int num_servers, const Config& config);
  ~ShardServer();

  // Binds tcp://*:port (port 0: one free port per ZeroMQ I/O thread, TFPS_IO_THREADS),
  // registers with the scheduler and waits for the cluster.
  Status Start(const std::string& scheduler_host, int scheduler_port, int port,
               const std::string& host);
  // Serves until every worker said goodbye or is gone, or `stop` is set. An exit
  // code, or kStoppedMidJob (exit_codes.h) when `stop` ended it before the workers finished.
  int Run(const std::atomic<bool>& stop);

 private:
  struct Work {
    enum Kind { kPush, kWorkerLost, kJoin } kind = kPush;
    Head head;
    zmq::message_t payload;
    Buffer data;  // the payload once accepted, counted in budget_ until freed
    // A kPushPullShm's payload, read in place, and the segment its answer goes into.
    Buffer shm_payload;
    std::shared_ptr<ShmSegment> shm;
    double received_us = 0;  // wall clock, for timed replies
    int rank = -1;
    std::string why;
    bool answer = false;  // kJoin: this thread answers it (one per server)
  };
  struct Inbox {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Work> queue;
  };

  // Reads this server's checkpoint files (TFPS_CHECKPOINT_DIR) into restored_, or writes
  // empty ones on a fresh start. `existing`: the files there before this job registered.
  Status RestoreCheckpoint(const std::vector<std::pair<int, int>>& existing);
  // Binds router_ to `port`, or to one free port per I/O thread (port 0), into ports_.
  Status BindPorts(int port);
  ShardInfo ShardInfoOf(int thread) const;
  void SummationLoop(int index);
  // Writes thread `index`'s file (TFPS_CHECKPOINT_DIR). A failure is a warning the workers
  // hear (through the scheduler); kCheckpointFailuresFatal in a row end the job.
  void CheckpointOnSummationThread(int index, KeyStore& store);
  // Queues a notice for the scheduler (any thread); the I/O thread sends it.
  void PostNotice(const Status& status, const std::string& warning);
  // Sends queued notices; reads the scheduler's. False once the job cannot go on (a
  // member failed or died): *why says so.
  bool ExchangeNoticesOnIoThread(std::string* why);
  // Whether every summation thread progressed within TFPS_HEARTBEAT_TIMEOUT (thread_watch.h):
  // only then are the scheduler's pings answered. A stuck thread is logged and named to
  // the scheduler (a warning every member hears) once.
  bool SummationThreadsAliveOnIoThread();
  // Stops and joins the summation threads; false (nothing joined) when one is stuck
  // (thread_watch.h): the process must then exit without it.
  bool StopSummationThreadsOnIoThread();
  void SummationWorkOnSummationThread(KeyStore& store, Work& w, std::vector<Outgoing>* replies,
                                      ShmAnswers* shm_answers);
  uint64_t MaxMessageBytes() const;
  void PostReplies(std::vector<Outgoing>* replies);
  void OnMessageOnIoThread(std::vector<zmq::message_t>& frames);
  // Decodes a worker's message [identity][head][payload?] into *out and checks it comes
  // from the worker it names; false (logged, or the worker told) when it is dropped.
  bool DecodeOnIoThread(const std::string& identity, std::vector<zmq::message_t>& frames,
                        Head* out);
  // Marks the worker connected and answers with the server's shared-memory offer.
  void OnHelloOnIoThread(const std::string& identity, int rank,
                         std::vector<zmq::message_t>& frames);
  // A single push, over the socket or (kPushPullShm) out of the sender's segment.
  void OnPushOnIoThread(const std::string& identity, Head head,
                        std::vector<zmq::message_t>& frames);
  // Hands a join to every summation thread; the first answers it.
  void OnJoinOnIoThread(const Head& head);
  // A batch of pushes [identity][batch head][head][payload]...: checked whole, then each
  // push accepted as if it had come alone.
  void OnBatchOnIoThread(const std::string& identity, const Header& batch,
                         std::vector<zmq::message_t>& frames);
  // Queues each push for its summation thread and acknowledges at once those with
  // kFlagAck (the worker's scheduling credit), in one message.
  void AcceptPushesOnIoThread(const std::string& identity, std::vector<Work> works);
  // Counts a socket push's payload against TFPS_SERVER_PUSH_BYTES (push_budget.h) into
  // w->data; over the limit, answers the push with an error naming worker and tensor, and
  // returns false.
  bool AdmitOnIoThread(const std::string& identity, Work* w);
  // A kPushPullShm's payload out of its sender's segment into *w (then a kPushPull); on
  // failure sends an error about that push, so that it fails at once, and returns false.
  bool ReceiveShmOnIoThread(const std::string& identity, Work* w);
  void OnWorkerGoneOnIoThread(int rank, const std::string& why);
  void SendOutboxOnIoThread();
  // Logs "dropped <what> from <peer>: <status>" and sends the peer an error reply, both
  // rate-limited per peer.
  void RejectOnIoThread(const std::string& identity, const char* what, const Status& status);

  const int num_workers_;
  const int num_servers_;
  const Config config_;
  int server_id_ = -1;
  Consistency consistency_;  // the job's, from the scheduler (set in Start)
  std::vector<std::string> worker_hosts_;  // by rank, from the scheduler (set in Start)
  zmq::context_t context_;
  zmq::socket_t router_;
  std::vector<int> ports_;  // router_'s, the i-th on I/O thread i (set in Start)
  zmq::socket_t scheduler_;
  std::unique_ptr<ZapHandler> zap_;  // with a job key: admits only its holders
  PushBudget budget_;                // TFPS_SERVER_PUSH_BYTES
  std::vector<std::unique_ptr<Inbox>> inboxes_;
  std::vector<ShardParams> restored_;  // per thread, read in Start(); empty: nothing restored
  std::vector<std::thread> threads_;
  std::unique_ptr<ThreadWatch> watch_;  // the summation threads' progress (set in Start)
  std::atomic<bool> stopping_{false};
  std::mutex outbox_mu_;
  std::vector<Outgoing> outbox_;  // guarded by outbox_mu_
  std::vector<std::pair<Status, std::string>> notices_;  // guarded by outbox_mu_
  std::atomic<int> checkpoint_failures_{0};  // in a row, over all summation threads
  int wake_fd_ = -1;              // eventfd: the outbox has replies

  // I/O-thread state.
  std::map<int, int> fd_of_rank_;
  PeerRateLimiter limiter_;  // what misbehaving peers make us log and answer
  std::vector<int> worker_state_;  // 0 unseen, 1 connected, 2 said goodbye, 3 gone
  ShmPeers shm_;                   // colocated workers' shared memory (TFPS_SHM_SERVER)
  int stuck_reported_ = -1;        // the summation thread last named stuck; -1: none
};

}  // namespace tfps

#endif  // TFPS_PS_SERVER_SHARD_SERVER_H_

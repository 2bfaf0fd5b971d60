// The engine thread's loop (loop.h): other threads queue requests and wake it through an
// eventfd; each turn it starts what was queued, sends what the credit allows, reads the
// servers' replies and checks the deadlines.
#include "tf_ps_ops/cc/engine/loop.h"

#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>

#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/common/metrics.h"
#include "tf_ps_ops/cc/engine/stop_signal.h"

namespace tfps {

using Clock = std::chrono::steady_clock;

Engine::Loop::Loop(const Config& config, int rank, int size)
    : config_(config), rank_(rank), context_(config.io_threads),
      mesh_(context_, config, rank, size, loop_thread_) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  cycle_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  zap_ = ZapHandler::StartIfKeyed(context_, config_);  // before the peer port binds
  fusion_bytes_ = config_.fusion_bytes;
  scheduling_credit_ = config_.scheduling_credit;
  cycle_us_ = config_.cycle_us;
  mesh_.set_timeline(&timeline_);
}

Engine::Loop::~Loop() {
  close(wake_fd_);
  close(cycle_fd_);
}

void Engine::Loop::WatchStopSignal() { stop_fd_ = InstallStopSignal(); }

void Engine::Loop::OnJobFailed(std::function<void(const Status&)> listener) {
  std::lock_guard<std::mutex> lock(failed_mu_);
  if (!failed_seen_.ok()) {
    listener(failed_seen_);
    return;
  }
  failed_listeners_.push_back(std::move(listener));
}

EngineStats Engine::Loop::stats() const {
  // The mesh's count directly: a gather's caller may read it as soon as it is done.
  return EngineStats{bytes_sent_.load(), bytes_received_.load(), messages_sent_.load(),
                     mesh_.bytes_sent(), parts_sent_.load(), batches_sent_.load(),
                     batches_received_.load(), codec_.raw_bytes(), codec_.encoded_bytes(),
                     codec_.micros(), mesh_.bytes_received(), shm_parts_sent_.load()};
}

void Engine::Loop::Enqueue(std::vector<Request> requests) {
  bool accepted = false;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (!stopping_) {
      for (Request& r : requests) queue_.push_back(std::move(r));
      metrics::worker_request_queue.Set(static_cast<int64_t>(queue_.size()));
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
  Wake();
}

bool Engine::Loop::PostTimelineTask(TimelineTask task) {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (stopping_) return false;
    timeline_tasks_.push_back(std::move(task));
  }
  Wake();
  return true;
}

void Engine::Loop::RequestStop() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stopping_ = true;
  }
  Wake();
}

void Engine::Loop::Wake() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void Engine::Loop::RunOnLoop() {
  loop_thread_.Claim();  // from here on, the loop's state is this thread's alone
  while (true) {
    PollOnLoop();
    std::deque<Request> requests;
    std::vector<TimelineTask> timeline_tasks;
    const bool stop = TakeQueueOnLoop(&requests, &timeline_tasks);
    metrics::worker_request_queue.Set(0);
    for (TimelineTask& task : timeline_tasks) task(timeline_, rank_);
    if (!requests.empty()) timeline_.MarkCycle();
    if (stop_fd_ >= 0 && CaughtStopSignal() != 0) StoppedBySignalOnLoop();
    StartQueuedOnLoop(requests, polled_.scheduler ? ReadNoticesOnLoop() : job_failed_);
    PumpOnLoop();  // everything started together can leave together
    mesh_.PollOnLoop();
    ReadServersOnLoop();
    PumpOnLoop();  // answers freed credit
    CheckDeadlinesOnLoop();
    mesh_.CheckDeadlinesOnLoop(Clock::now());
    metrics::worker_partitions_in_flight.Set(static_cast<int64_t>(pending_.size()));
    metrics::worker_send_queue.Set(static_cast<int64_t>(ready_.size()));
    if (stop) break;
  }
  EndOnLoop();
}

void Engine::Loop::PollOnLoop() {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  std::vector<zmq::pollitem_t> items;
  for (Server& s : servers_) {
    items.push_back({s.socket->handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({s.monitor->socket().handle(), 0, ZMQ_POLLIN, 0});
  }
  items.push_back({nullptr, wake_fd_, ZMQ_POLLIN, 0});
  const size_t cycle_item = items.size();
  items.push_back({nullptr, cycle_fd_, ZMQ_POLLIN, 0});
  const size_t scheduler_item = items.size();
  items.push_back({scheduler_->handle(), 0, ZMQ_POLLIN, 0});
  if (stop_fd_ >= 0) items.push_back({nullptr, stop_fd_, ZMQ_POLLIN, 0});
  mesh_.AppendPollItems(&items);
  Poll(items.data(), items.size(), mesh_.PollTimeoutMs(100));
  polled_.server.assign(servers_.size(), 0);
  polled_.monitor.assign(servers_.size(), 0);
  for (size_t i = 0; i < servers_.size(); ++i) {
    polled_.server[i] = (items[2 * i].revents & ZMQ_POLLIN) != 0;
    polled_.monitor[i] = (items[2 * i + 1].revents & ZMQ_POLLIN) != 0;
  }
  polled_.scheduler = (items[scheduler_item].revents & ZMQ_POLLIN) != 0;
  uint64_t n;
  (void)!read(wake_fd_, &n, sizeof(n));
  if (items[cycle_item].revents & ZMQ_POLLIN) {  // a batch is due: this turn's pumps send it
    (void)!read(cycle_fd_, &n, sizeof(n));
    cycle_armed_ = Clock::time_point::max();
  }
}

bool Engine::Loop::TakeQueueOnLoop(std::deque<Request>* requests,
                                   std::vector<TimelineTask>* tasks) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  std::lock_guard<std::mutex> lock(queue_mu_);
  requests->swap(queue_);
  tasks->swap(timeline_tasks_);
  return stopping_;
}

void Engine::Loop::StartQueuedOnLoop(std::deque<Request>& requests, const Status& failed) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  for (Request& r : requests) {
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
}

void Engine::Loop::ReadServersOnLoop() {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  std::vector<zmq::message_t> frames;
  // (The list of servers is fixed once connected; the bound only guards the index.)
  const size_t polled = std::min(servers_.size(), polled_.server.size());
  for (size_t i = 0; i < polled; ++i) {
    if (polled_.server[i]) {
      while (RecvFrames(*servers_[i].socket, &frames)) {
        OnMessageOnLoop(static_cast<int>(i), frames);
      }
    }
    if (!polled_.monitor[i]) continue;
    int event = 0, value = 0;
    std::string address;
    while (servers_[i].monitor->Read(&event, &value, &address)) {
      if (event == ZMQ_EVENT_DISCONNECTED) {
        ServerDiedOnLoop(static_cast<int>(i), "closed the connection (did the server die?)");
      }
    }
  }
}

void Engine::Loop::EndOnLoop() {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const Status aborted = Aborted("tf_ps_ops was shut down while this request was in flight");
  while (!ops_.empty()) FinishOnLoop(ops_.begin()->first, aborted);
  for (ServerBatch& b : batches_) b.Clear();  // what waited for its cycle: aborted calls
  mesh_.FailAllOnLoop(aborted);
  SayGoodbyeOnLoop();
  Status written = timeline_.Write();
  if (!written.ok()) TFPS_LOG(Error) << written.message();
}

}  // namespace tfps

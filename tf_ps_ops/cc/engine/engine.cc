// The engine's facade (engine.h): Init connects the loop (loop.h) and starts its thread,
// Enqueue hands requests to it or to hierarchical aggregation (local/hierarchical.h),
// Shutdown stops both.
#include "tf_ps_ops/cc/engine/engine.h"

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include <zmq.hpp>

#include "tf_ps_ops/cc/cluster/rendezvous.h"
#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/common/metrics.h"
#include "tf_ps_ops/cc/engine/local/hierarchical.h"
#include "tf_ps_ops/cc/engine/local/hierarchical_setup.h"
#include "tf_ps_ops/cc/engine/loop.h"
#include "tf_ps_ops/cc/engine/stop_signal.h"
#include "tf_ps_ops/cc/engine/timeline_control.h"
#include "tf_ps_ops/cc/transport/metrics_http.h"

namespace tfps {

using Clock = std::chrono::steady_clock;

namespace {

// The worker's metrics port (TFPS_METRICS_PORT), from Init to Shutdown; guarded by the
// engine's mu_ (kept here, not in engine.h, so the engine's header stays as it is).
std::unique_ptr<MetricsEndpoint> g_metrics_endpoint;

// Per tensor name, the calls completed: its largest is the worker's step count.
std::mutex g_steps_mu;
std::unordered_map<std::string, uint64_t> g_steps;  // guarded by g_steps_mu

// Wraps `request.done` to count the call, its latency and its failure.
void CountCall(PushPullRequest* request) {
  const Clock::time_point enqueued = request->enqueued;
  request->done = [done = std::move(request->done), name = request->name,
                   enqueued](const Status& status) {
    metrics::worker_push_pull_seconds.Observe(
        std::chrono::duration<double>(Clock::now() - enqueued).count());
    metrics::worker_push_pulls.Add();
    if (!status.ok()) {
      metrics::errors.Add();
    } else {
      uint64_t calls;
      {
        std::lock_guard<std::mutex> lock(g_steps_mu);
        calls = ++g_steps[name];
      }
      metrics::worker_steps.RaiseTo(calls);
    }
    done(status);
  };
}

}  // namespace

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
  SetMetricsRole(kWorkerRole, "worker", options.rank);
  TFPS_RETURN_IF_ERROR(MetricsEndpoint::StartIfAsked(
      config, "worker " + std::to_string(options.rank), &g_metrics_endpoint));
  auto loop = std::make_unique<Loop>(config, options.rank, options.size);
  ClusterView view;
  Status s;
  try {
    s = loop->Connect(options, &view);
  } catch (const zmq::error_t& e) {
    s = Unavailable(std::string("ZeroMQ error while connecting: ") + e.what());
  }
  if (!s.ok()) {
    g_metrics_endpoint.reset();
    return s;
  }
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
  SetTimelinePoster([weak = std::weak_ptr<Loop>(running)](Loop::TimelineTask task) {
    std::shared_ptr<Loop> loop = weak.lock();
    return loop != nullptr && loop->PostTimelineTask(std::move(task));
  });
  s = StartHierarchical(config, view);
  if (!s.ok()) {
    running->RequestStop();
    thread_.join();
    std::lock_guard<std::mutex> loop_lock(loop_mu_);
    loop_.reset();
    g_metrics_endpoint.reset();
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
  g_metrics_endpoint.reset();
}

Status Engine::StartHierarchical(const Config& config, const ClusterView& view) {
  job_compresses_ = !config.compression.empty() && config.compression != "none";
  std::weak_ptr<Loop> weak;
  {
    std::lock_guard<std::mutex> loop_lock(loop_mu_);
    weak = loop_;
  }
  HierarchicalHooks hooks;
  hooks.gather = [this](GatherRequest gather) { EnqueueGather(std::move(gather)); };
  hooks.submit = [weak](PushPullRequest push) {
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
  hooks.on_job_failed = [weak](std::function<void(const Status&)> listener) {
    if (std::shared_ptr<Loop> loop = weak.lock()) loop->OnJobFailed(std::move(listener));
  };
  std::shared_ptr<Hierarchical> hierarchical;
  TFPS_RETURN_IF_ERROR(
      SetUpHierarchical(this, config, view, rank_, local_rank_, hooks, &hierarchical));
  if (hierarchical == nullptr) return Status::Ok();  // the job runs flat
  std::lock_guard<std::mutex> loop_lock(loop_mu_);
  hierarchical_ = std::move(hierarchical);
  return Status::Ok();
}

EngineStats Engine::stats() {
  std::lock_guard<std::mutex> lock(loop_mu_);
  return loop_ ? loop_->stats() : EngineStats();
}

Status Engine::SetTuning(int64_t fusion_bytes, int64_t scheduling_credit) {
  std::lock_guard<std::mutex> lock(loop_mu_);
  if (!loop_) {
    return FailedPrecondition("tf_ps_ops is not initialised: call tf_ps_ops.init() before "
                              "changing the fusion threshold or the scheduling credit");
  }
  const int64_t most = std::min(kMaxFusionBytes, loop_->max_message_bytes());
  if (fusion_bytes < 0 || fusion_bytes > most) {
    return InvalidArgument("fusion threshold " + std::to_string(fusion_bytes) +
                           " B: must be between 0 (no fusion) and " + std::to_string(most) +
                           " (TFPS_MAX_MESSAGE_BYTES)");
  }
  if (scheduling_credit < 0 || scheduling_credit > kMaxSchedulingCredit) {
    return InvalidArgument("scheduling credit " + std::to_string(scheduling_credit) +
                           " B: must be between 0 (unlimited) and 2^40");
  }
  loop_->SetTuning(fusion_bytes, scheduling_credit);
  return Status::Ok();
}

Status Engine::SetCycle(int64_t cycle_us) {
  std::lock_guard<std::mutex> lock(loop_mu_);
  if (!loop_) {
    return FailedPrecondition("tf_ps_ops is not initialised: call tf_ps_ops.init() before "
                              "changing the cycle time");
  }
  if (cycle_us < 0 || cycle_us > kMaxCycleUs) {
    return InvalidArgument("cycle time " + std::to_string(cycle_us) +
                           " us: must be between 0 (no cycle) and " +
                           std::to_string(kMaxCycleUs));
  }
  loop_->SetCycle(cycle_us);
  return Status::Ok();
}

int64_t Engine::CycleUs() {
  std::lock_guard<std::mutex> lock(loop_mu_);
  return loop_ ? loop_->cycle_us() : -1;
}

std::pair<int64_t, int64_t> Engine::Tuning() {
  std::lock_guard<std::mutex> lock(loop_mu_);
  if (!loop_) return {-1, -1};
  return {loop_->fusion_bytes(), loop_->scheduling_credit()};
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
    CountCall(&request);
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

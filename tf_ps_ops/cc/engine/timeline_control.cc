#include "tf_ps_ops/cc/engine/timeline_control.h"

#include <chrono>
#include <future>
#include <memory>
#include <mutex>

#include "tf_ps_ops/cc/engine/timeline.h"

namespace tfps {

namespace {

// How StartTimeline / StopTimeline reach the running engine's thread (set by Init).
std::mutex& TimelinePosterMutex() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}

TimelinePoster& Poster() {
  static auto* poster = new TimelinePoster();
  return *poster;
}

// Runs `task` on the engine thread and waits for its status.
Status OnTimeline(std::function<Status(Timeline&, int)> task) {
  auto result = std::make_shared<std::promise<Status>>();
  std::future<Status> done = result->get_future();
  bool posted = false;
  {
    std::lock_guard<std::mutex> lock(TimelinePosterMutex());
    if (Poster()) {
      posted = Poster()([task, result](Timeline& timeline, int rank) {
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

void SetTimelinePoster(TimelinePoster post) {
  std::lock_guard<std::mutex> lock(TimelinePosterMutex());
  Poster() = std::move(post);
}

}  // namespace tfps

// A Chrome-trace ("Trace Event Format") timeline of one worker's communication, written
// when the engine shuts down (TFPS_TIMELINE=path; "%r" in the path becomes the rank).
// Open it in chrome://tracing or https://ui.perfetto.dev. Per tensor it shows the stages:
//   queued   - from the kernel's Enqueue until the engine thread took the request
//   scheduled - waiting for scheduling credit (TFPS_SCHEDULING_CREDIT)
//   push_pull - from the first partition sent until the last answer (server included)
//   written  - the kernel's completion (output written, TF notified)
// Recorded on the engine thread only: no locks.
#ifndef TFPS_CC_ENGINE_TIMELINE_H_
#define TFPS_CC_ENGINE_TIMELINE_H_

#include <chrono>
#include <string>
#include <vector>

#include "tf_ps_ops/cc/common/status.h"

namespace tfps {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  // An empty path disables recording.
  void Open(const std::string& path, int rank);
  bool enabled() const { return !path_.empty(); }
  void Record(const std::string& tensor, const char* stage, Clock::time_point begin,
              Clock::time_point end, uint64_t bytes);
  // Writes the file (atomically: temp file, then rename).
  Status Write();

 private:
  struct Event {
    std::string tensor;
    const char* stage;
    int64_t begin_us;
    int64_t duration_us;
    uint64_t bytes;
  };
  std::string path_;
  int rank_ = 0;
  Clock::time_point origin_;
  std::vector<Event> events_;
};

}  // namespace tfps

#endif  // TFPS_CC_ENGINE_TIMELINE_H_

// A Chrome-trace ("Trace Event Format") timeline of one worker's communication, written
// when the engine shuts down (TFPS_TIMELINE=path; "%r" in the path becomes the rank).
// Open it in chrome://tracing or https://ui.perfetto.dev. Per tensor it shows the stages:
//   queued   - from the kernel's Enqueue until the engine thread took the request
//   scheduled - waiting for scheduling credit (TFPS_SCHEDULING_CREDIT)
//   push     - from the first partition sent until the server had the last one
//   server   - until the server's answer was ready (waiting for the other workers, the
//              sum or the PS-mode update): the servers stamp their replies with their wall
//              clock, so on different hosts this assumes synchronised clocks (NTP); the
//              stamps are clamped into the worker's own interval
//   pull     - until the last answer arrived
//   (push_pull - push + server + pull, when the answers carried no stamps)
//   written  - the kernel's completion (output written, TF notified)
// A peer collective (allgather, alltoall, neighbour exchange: SFB's factors, an
// embedding's rows) shows one stage named after it, from this worker's start until the
// latest peer's part arrived (the exchange and the wait for the slowest peer), then
// "written".
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
  // The steady-clock time of a wall-clock stamp (microseconds since the epoch).
  Clock::time_point FromWallMicros(double us) const;
  // Writes the file (atomically: temp file, then rename).
  Status Write();
  // Stops recording (after Write); events are dropped.
  void Close();
  // An instant CYCLE_START event now, if recording with cycle marks on.
  void set_mark_cycles(bool on) { mark_cycles_ = on; }
  void MarkCycle();

 private:
  struct Event {
    std::string tensor;
    const char* stage;
    int64_t begin_us;
    int64_t duration_us;  // < 0: an instant event
    uint64_t bytes;
  };
  std::string path_;
  int rank_ = 0;
  Clock::time_point origin_;
  double origin_wall_us_ = 0;  // the wall clock at origin_
  std::vector<Event> events_;
  bool mark_cycles_ = false;
};

}  // namespace tfps

#endif  // TFPS_CC_ENGINE_TIMELINE_H_

// Whether a server's summation threads make progress, for the I/O thread's answer to the
// scheduler's heartbeat (wire kPing / kPong, liveness.h). Each summation thread stamps its
// slot whenever it starts something (waiting for work, a push, the timeout tick, a
// checkpoint); an idle thread still stamps every 250 ms. The I/O thread answers a ping only
// while every slot is younger than TFPS_HEARTBEAT_TIMEOUT, so a server whose summation
// thread is wedged (a blocked write, a deadlock) is named hung like one whose I/O thread
// is, and its log and the scheduler's warning say which thread, doing what.
// Stamped on the summation threads, read on the I/O thread: atomics only.
#ifndef TFPS_PS_SERVER_THREAD_WATCH_H_
#define TFPS_PS_SERVER_THREAD_WATCH_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace tfps {

class ThreadWatch {
 public:
  // kExited: the thread has returned; it is never stuck.
  enum Activity : int { kWaiting = 0, kPush, kTick, kReplies, kCheckpoint, kExited };

  explicit ThreadWatch(int threads);

  // On summation thread `index`: it lives and now starts `what`.
  void Beat(int index, Activity what);
  // On the I/O thread: the first thread silent for longer than `window_s` (-1: none), how
  // long (*quiet_s) and what it last started (*doing, e.g. "a push").
  int Stuck(double window_s, double* quiet_s, std::string* doing) const;
  // Whether every thread has returned (Beat(i, kExited)).
  bool AllExited() const;

 private:
  struct Slot {
    std::atomic<int64_t> stamp_ns{0};  // steady clock
    std::atomic<int> what{kWaiting};
  };
  const int threads_;
  std::unique_ptr<Slot[]> slots_;
};

}  // namespace tfps

#endif  // TFPS_PS_SERVER_THREAD_WATCH_H_

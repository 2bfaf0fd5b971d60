#include "ps_server/thread_watch.h"

#include <chrono>

namespace tfps {

namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* Describe(int what) {
  switch (what) {
    case ThreadWatch::kPush: return "handling a push (summing, or answering its round)";
    case ThreadWatch::kTick: return "checking its rounds' timeouts";
    case ThreadWatch::kReplies: return "writing sums into workers' shared memory";
    case ThreadWatch::kCheckpoint: return "writing its checkpoint";
    default: return "waiting for work";
  }
}

}  // namespace

ThreadWatch::ThreadWatch(int threads) : threads_(threads), slots_(new Slot[threads]) {
  const int64_t now = NowNs();  // a thread that never ran counts from its creation
  for (int i = 0; i < threads_; ++i) slots_[i].stamp_ns.store(now, std::memory_order_relaxed);
}

void ThreadWatch::Beat(int index, Activity what) {
  slots_[index].what.store(what, std::memory_order_relaxed);
  slots_[index].stamp_ns.store(NowNs(), std::memory_order_release);
}

int ThreadWatch::Stuck(double window_s, double* quiet_s, std::string* doing) const {
  const int64_t now = NowNs();
  for (int i = 0; i < threads_; ++i) {
    const double quiet = (now - slots_[i].stamp_ns.load(std::memory_order_acquire)) * 1e-9;
    if (quiet > window_s && slots_[i].what.load(std::memory_order_relaxed) != kExited) {
      *quiet_s = quiet;
      *doing = Describe(slots_[i].what.load(std::memory_order_relaxed));
      return i;
    }
  }
  return -1;
}

bool ThreadWatch::AllExited() const {
  for (int i = 0; i < threads_; ++i) {
    if (slots_[i].what.load(std::memory_order_acquire) != kExited) return false;
  }
  return true;
}

}  // namespace tfps

// The thread that owns a loop's state (tensorpipe checks its `...FromLoop` methods the same
// way). Methods named `...OnLoop` read and write state nothing else guards; a call from
// another thread would race on it and corrupt it long before anything noticed, so each such
// method checks first and a wrong thread is fatal at once, naming the method.
#ifndef TFPS_CC_COMMON_LOOP_THREAD_H_
#define TFPS_CC_COMMON_LOOP_THREAD_H_

#include <atomic>
#include <thread>

namespace tfps {

class LoopThread {
 public:
  // The constructing thread owns the state until the loop starts and claims it.
  LoopThread() : owner_(std::this_thread::get_id()) {}

  // The calling thread becomes the owner: the loop thread, first thing when it starts.
  void Claim() { owner_.store(std::this_thread::get_id(), std::memory_order_relaxed); }

  // One load and a compare: cheap enough for every call on the data path.
  void Check(const char* method) const {
    if (owner_.load(std::memory_order_relaxed) != std::this_thread::get_id()) {
      Violated(method);
    }
  }

 private:
  [[noreturn]] static void Violated(const char* method);

  std::atomic<std::thread::id> owner_;
};

}  // namespace tfps

// At the top of every ...OnLoop method; names the method (with its class) if it is violated.
#define TFPS_CHECK_ON_LOOP(loop_thread) (loop_thread).Check(__PRETTY_FUNCTION__)

#endif  // TFPS_CC_COMMON_LOOP_THREAD_H_

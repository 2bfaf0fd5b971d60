#include "tf_ps_ops/cc/common/loop_thread.h"

#include <cstdlib>

#include "tf_ps_ops/cc/common/logging.h"

namespace tfps {

void LoopThread::Violated(const char* method) {
  // Fatal, not an error status: the caller is a bug in this library, and going on would
  // race on the loop's state.
  TFPS_LOG(Error) << "FATAL: " << method
                  << " must run on the loop thread that owns its state, but was called "
                     "from another thread";
  std::abort();
}

}  // namespace tfps

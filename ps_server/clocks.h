// SSP's vector clock (Ho et al., NIPS'13; docs/consistency.md): for each (key, partition)
// a summation thread owns, every worker's clock (the highest step it pushed there), and
// the reads (answers to pushes) that wait for the slowest worker. Under ssp:S a read of
// step t may leave once every worker's clock is >= t - S; under asp at once (nothing
// queues). A read is queued, not polled: Ready() hands out what a push just unblocked.
// A read blocked by a lost worker never lifts and fails at once; one blocked by a slow
// worker gets stall warnings (and fails after TFPS_STALL_SHUTDOWN, if set), naming it.
// Owned by one summation thread: no locks.
#ifndef TFPS_PS_SERVER_CLOCKS_H_
#define TFPS_PS_SERVER_CLOCKS_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tf_ps_ops/cc/common/consistency.h"
#include "tf_ps_ops/cc/common/stall.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

class ClockTable {
 public:
  using Clock = std::chrono::steady_clock;
  using Slot = std::pair<uint64_t, uint32_t>;  // key, partition

  struct Read {
    Header push;  // the push this read answers: key, partition, step, sender
    Clock::time_point since;
    int stall_warnings = 0;  // given so far (one every TFPS_STALL_WARNING)
  };
  struct Failed {
    Read read;
    Status status;
  };

  ClockTable(int num_workers, int server_id, Consistency consistency);

  // `rank` pushed `step` of `slot`: its clock there is at least `step`.
  void Advance(const Slot& slot, int rank, uint64_t step);
  // Whether a read of `step` may leave now.
  bool MayRead(const Slot& slot, uint64_t step) const;
  // Queues a read that may not leave yet (MayRead was false).
  void Wait(const Read& read);
  // The queued reads of `slot` that may leave now (in arrival order), and those that never
  // can (a lost worker blocks them), both taken off the queue.
  void Ready(const Slot& slot, std::vector<Read>* ready, std::vector<Failed>* failed);
  // Reads that wait on live workers: a stall warning every TFPS_STALL_WARNING to
  // *warnings; those queued longer than TFPS_STALL_SHUTDOWN (if set) are taken off the
  // queue and returned, each with the error.
  std::vector<Failed> Expired(Clock::time_point now, const StallPolicy& stall,
                              std::vector<std::string>* warnings);
  // The worker is gone: its clock stops for good; the reads it blocks fail.
  std::vector<Failed> OnWorkerLost(int rank, const std::string& why);

  // The slowest worker's clock at `slot` (0 before every worker pushed it).
  uint64_t MinClock(const Slot& slot) const;
  uint64_t ClockOf(const Slot& slot, int rank) const;
  size_t waiting() const;
  const Consistency& consistency() const { return consistency_; }

 private:
  // The workers whose clock keeps a read of `step` waiting: "worker 2 (at step 5)".
  std::string Behind(const Slot& slot, uint64_t step, bool* lost_only) const;
  uint64_t Needed(uint64_t step) const;  // the slowest clock a read of `step` needs

  const int num_workers_;
  const int server_id_;
  const Consistency consistency_;
  std::map<Slot, std::vector<uint64_t>> clocks_;
  std::map<Slot, std::deque<Read>> waiting_;
  std::map<int, std::string> lost_;  // rank -> why
};

}  // namespace tfps

#endif  // TFPS_PS_SERVER_CLOCKS_H_

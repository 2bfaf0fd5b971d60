// Slow is not dead: the policy for a wait on members that are alive (docs/errors.md,
// "Which waits are bounded by what"). A dead or stopped member fails a wait at once (its
// closed connection, or the scheduler's heartbeats, name it); a member that is alive but
// busy (a rank-0-only evaluation, a large checkpoint, a slow first step) only makes the
// others warn every TFPS_STALL_WARNING seconds, naming the tensor, the ranks that submitted
// it and those that did not, and ends the job only after TFPS_STALL_SHUTDOWN (0: never).
#ifndef TFPS_CC_COMMON_STALL_H_
#define TFPS_CC_COMMON_STALL_H_

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "tf_ps_ops/cc/common/status.h"

namespace tfps {

struct StallPolicy {
  double warning_s = 60;  // TFPS_STALL_WARNING: a warning every this many seconds (0: none)
  double shutdown_s = 0;  // TFPS_STALL_SHUTDOWN: the wait fails after this long (0: never)
};

using StallClock = std::chrono::steady_clock;

inline double SecondsSince(StallClock::time_point since, StallClock::time_point now) {
  return std::chrono::duration<double>(now - since).count();
}

// Whether a wait begun at `since` is due its next warning at `now` (one every warning_s);
// `*warned` counts the warnings given, and is advanced when one is due.
inline bool StallWarningDue(const StallPolicy& policy, StallClock::time_point since,
                            StallClock::time_point now, int* warned) {
  if (policy.warning_s <= 0) return false;
  const int due = static_cast<int>(SecondsSince(since, now) / policy.warning_s);
  if (due <= *warned) return false;
  *warned = due;
  return true;
}

inline bool StallShutdownDue(const StallPolicy& policy, StallClock::time_point since,
                             StallClock::time_point now) {
  return policy.shutdown_s > 0 && SecondsSince(since, now) >= policy.shutdown_s;
}

// The latest time point a wait begun at `since` may fail at (its shutdown, with `slack`
// seconds for the side that decides to answer first); max(): never.
inline StallClock::time_point StallDeadline(const StallPolicy& policy,
                                            StallClock::time_point since, double slack = 0) {
  if (policy.shutdown_s <= 0) return StallClock::time_point::max();
  return since + std::chrono::duration_cast<StallClock::duration>(
                     std::chrono::duration<double>(policy.shutdown_s + slack));
}

// "0, 2, 5" (or "none").
inline std::string RankList(const std::vector<int>& ranks) {
  if (ranks.empty()) return "none";
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

inline std::string WholeSeconds(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.0f", s);
  return text;
}

// "tensor 0x0123456789abcdef": how a server names a tensor (it knows only its key); a
// worker's engine writes the name it knows in its place when it logs a relayed warning.
inline std::string TensorOfKey(uint64_t key) {
  char text[40];
  std::snprintf(text, sizeof(text), "tensor 0x%016llx", static_cast<unsigned long long>(key));
  return text;
}

// The warning line: "stall warning: <what> has waited 62 s: submitted by rank(s) 1; missing
// rank(s) 0 (alive: slow, not dead) ...".
inline std::string StallWarningText(const std::string& what, const std::string& submitted,
                                    const std::string& missing, double waited_s) {
  return "stall warning: " + what + " has waited " + WholeSeconds(waited_s) +
         " s: submitted by rank(s) " + submitted + "; missing rank(s) " + missing +
         ", alive but not submitting (a long callback, evaluation or checkpoint on those "
         "ranks, or different code?); the job waits on (TFPS_STALL_SHUTDOWN ends it)";
}

// The error a wait fails with once TFPS_STALL_SHUTDOWN has passed.
inline Status StallShutdownStatus(const StallPolicy& policy, const std::string& what,
                                  const std::string& submitted, const std::string& missing) {
  return DeadlineExceeded("stalled for " + WholeSeconds(policy.shutdown_s) +
                          " s (TFPS_STALL_SHUTDOWN): " + what + " was submitted by rank(s) " +
                          submitted + " but not by rank(s) " + missing +
                          ", which are alive; are they stuck or running other code? Raise "
                          "TFPS_STALL_SHUTDOWN, or set it to 0 to wait for slow ranks");
}

}  // namespace tfps

#endif  // TFPS_CC_COMMON_STALL_H_

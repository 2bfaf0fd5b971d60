// ShmLocalReduce's stall warnings (shm_local_reduce.h, cc/common/stall.h): what a call that
// waits on a local peer says after TFPS_STALL_WARNING and how it fails after
// TFPS_STALL_SHUTDOWN, whom a leader's reduce waits for, and the leader's warning when its
// members wait for it.
#include <algorithm>
#include <string>
#include <vector>

#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/common/metrics.h"
#include "tf_ps_ops/cc/engine/local/shm_local_reduce.h"

namespace tfps {

std::optional<Status> ShmLocalReduce::StalledOnPoll(Task& task, Clock::time_point now) {
  const bool timed_out = StallShutdownDue(stall_, task.since, now);
  if (!timed_out && !StallWarningDue(stall_, task.since, now, &task.stall_warnings)) {
    return std::nullopt;
  }
  const std::string waited_for = local_rank_ != 0 ? Describe(0) : NotHandedOnPoll(task.key);
  const std::string what =
      (task.what.empty() ? std::string("a local step") : task.what) + " on " +
      Describe(local_rank_) + " of " + std::to_string(local_size()) +
      " (hierarchical aggregation), waiting for " +
      (local_rank_ == 0 ? waited_for + " to hand over its tensor"
                        : "the local leader, " + Describe(0) + ", to answer");
  if (timed_out) {
    return DeadlineExceeded("stalled for " + WholeSeconds(stall_.shutdown_s) +
                            " s (TFPS_STALL_SHUTDOWN): " + what + "; " + waited_for +
                            " is alive: is it stuck or running other code? Raise "
                            "TFPS_STALL_SHUTDOWN, or set it to 0 to wait");
  }
  metrics::stalls.Add();
  TFPS_LOG(Warning) << "stall warning: " << what << ", has waited "
                    << WholeSeconds(SecondsSince(task.since, now)) << " s; " << waited_for
                    << " is alive (slow, not dead): the job waits on "
                    << "(TFPS_STALL_SHUTDOWN ends it)";
  return std::nullopt;
}

std::vector<int> ShmLocalReduce::HandedOnPoll(uint64_t key, uint64_t* step) const {
  std::vector<int> handed;
  auto found = segments_.find(key);
  if (found == segments_.end()) return handed;
  const Segments& segs = found->second;
  for (int lr = 1; lr < static_cast<int>(segs.peers.size()); ++lr) {
    if (!segs.peers[lr]) continue;
    const uint64_t ready = segs.peers[lr]->header()->ready_step.load(std::memory_order_acquire);
    if (ready == 0 || (ready & (kTaken | kCommitted)) != 0) continue;  // none, or taken
    handed.push_back(lr);
    *step = std::max(*step, ready);
  }
  return handed;
}

std::string ShmLocalReduce::DescribeAll(const std::vector<int>& local_ranks) const {
  std::string all;
  for (int lr : local_ranks) all += (all.empty() ? "" : ", ") + Describe(lr);
  return all;
}

std::string ShmLocalReduce::NotHandedOnPoll(std::optional<uint64_t> key) const {
  if (!key) return "a local worker";
  uint64_t step = 0;
  const std::vector<int> handed = HandedOnPoll(*key, &step);
  std::vector<int> missing;
  for (int lr = 1; lr < local_size(); ++lr) {
    if (std::find(handed.begin(), handed.end(), lr) == handed.end()) missing.push_back(lr);
  }
  return missing.empty() ? "a local worker" : DescribeAll(missing);
}

void ShmLocalReduce::WarnLeaderBehindOnPoll(const std::list<Task>& tasks, Clock::time_point now) {
  std::vector<uint64_t> busy;  // names this worker is summing: its own warnings cover them
  for (const Task& task : tasks) {
    if (task.key) busy.push_back(*task.key);
  }
  for (auto& [key, segs] : segments_) {
    uint64_t step = 0;
    const std::vector<int> handed = std::find(busy.begin(), busy.end(), key) == busy.end()
                                        ? HandedOnPoll(key, &step)
                                        : std::vector<int>();
    if (handed.empty() || step != segs.idle_step) {
      segs.idle_step = handed.empty() ? 0 : step;
      segs.idle_since = now;
      segs.idle_warnings = 0;
      continue;
    }
    if (!StallWarningDue(stall_, segs.idle_since, now, &segs.idle_warnings)) continue;
    metrics::stalls.Add();
    TFPS_LOG(Warning) << "stall warning: tensor '" << segs.name << "' (step "
                      << step << ") on " << Describe(0) << " of " << local_size()
                      << " (hierarchical aggregation): " << DescribeAll(handed)
                      << (handed.size() == 1 ? " has" : " have") << " handed it over and "
                      << "waited " << WholeSeconds(SecondsSince(segs.idle_since, now))
                      << " s for this worker, the local leader, which has not called it "
                      << "yet: this worker is the slow one (running other code?); the job "
                      << "waits on (TFPS_STALL_SHUTDOWN ends it)";
  }
}

}  // namespace tfps

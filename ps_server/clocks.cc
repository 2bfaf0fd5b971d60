#include "ps_server/clocks.h"

#include <algorithm>

namespace tfps {

namespace {

std::string WhereRead(int server_id, const Header& h) {
  return "server " + std::to_string(server_id) + ", step " + std::to_string(h.step) +
         ", partition " + std::to_string(h.partition);
}

}  // namespace

ClockTable::ClockTable(int num_workers, int server_id, Consistency consistency)
    : num_workers_(num_workers), server_id_(server_id), consistency_(consistency) {}

void ClockTable::Advance(const Slot& slot, int rank, uint64_t step) {
  auto& clocks = clocks_[slot];
  if (clocks.empty()) clocks.assign(num_workers_, 0);
  clocks[rank] = std::max(clocks[rank], step);
}

uint64_t ClockTable::Needed(uint64_t step) const {
  const uint64_t s = static_cast<uint64_t>(consistency_.staleness);
  return step > s ? step - s : 0;
}

uint64_t ClockTable::MinClock(const Slot& slot) const {
  auto it = clocks_.find(slot);
  if (it == clocks_.end()) return 0;
  return *std::min_element(it->second.begin(), it->second.end());
}

uint64_t ClockTable::ClockOf(const Slot& slot, int rank) const {
  auto it = clocks_.find(slot);
  return it == clocks_.end() ? 0 : it->second[rank];
}

bool ClockTable::MayRead(const Slot& slot, uint64_t step) const {
  if (consistency_.kind == Consistency::kAsp) return true;
  return MinClock(slot) >= Needed(step);
}

void ClockTable::Wait(const Read& read) {
  waiting_[Slot(read.push.key, read.push.partition)].push_back(read);
}

size_t ClockTable::waiting() const {
  size_t n = 0;
  for (const auto& w : waiting_) n += w.second.size();
  return n;
}

std::string ClockTable::Behind(const Slot& slot, uint64_t step, bool* lost_only) const {
  std::string out;
  *lost_only = true;
  auto it = clocks_.find(slot);
  for (int rank = 0; rank < num_workers_; ++rank) {
    const uint64_t clock = it == clocks_.end() ? 0 : it->second[rank];
    if (clock >= Needed(step)) continue;
    const auto lost = lost_.find(rank);
    if (lost == lost_.end()) *lost_only = false;
    out += (out.empty() ? "worker " : ", worker ") + std::to_string(rank) + " (at step " +
           std::to_string(clock) + (lost == lost_.end() ? "" : ", gone: " + lost->second) + ")";
  }
  return out;
}

void ClockTable::Ready(const Slot& slot, std::vector<Read>* ready, std::vector<Failed>* failed) {
  auto it = waiting_.find(slot);
  if (it == waiting_.end()) return;
  std::deque<Read>& queue = it->second;
  for (auto r = queue.begin(); r != queue.end();) {
    bool lost_only = false;
    if (MayRead(slot, r->push.step)) {
      ready->push_back(*r);
    } else if (!lost_.empty() &&
               (Behind(slot, r->push.step, &lost_only), lost_only)) {
      failed->push_back({*r, Unavailable(
          "under " + ConsistencyName(consistency_) + " this read of step " +
          std::to_string(r->push.step) + " needs every worker at step " +
          std::to_string(Needed(r->push.step)) + " or later, but " +
          Behind(slot, r->push.step, &lost_only) + " will never get there (" +
          WhereRead(server_id_, r->push) + ")")});
    } else {
      ++r;
      continue;
    }
    r = queue.erase(r);
  }
  if (queue.empty()) waiting_.erase(it);
}

std::vector<ClockTable::Failed> ClockTable::Expired(Clock::time_point now,
                                                    const StallPolicy& stall,
                                                    std::vector<std::string>* warnings) {
  std::vector<Failed> out;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    std::deque<Read>& queue = it->second;
    while (!queue.empty() && StallShutdownDue(stall, queue.front().since, now)) {
      const Read& r = queue.front();  // queued in time order
      bool lost_only = false;
      out.push_back({r, DeadlineExceeded(
          "stalled for " + WholeSeconds(stall.shutdown_s) + " s (TFPS_STALL_SHUTDOWN) under " +
          ConsistencyName(consistency_) + ": worker " + std::to_string(r.push.sender) +
          " at step " + std::to_string(r.push.step) + " may read only once every worker is at "
          "step " + std::to_string(Needed(r.push.step)) + ", but " +
          Behind(it->first, r.push.step, &lost_only) + " did not get there (" +
          WhereRead(server_id_, r.push) + "); are they stuck or running other code? Raise "
          "TFPS_STALL_SHUTDOWN, or set it to 0 to wait for slow workers")});
      queue.pop_front();
    }
    // One warning per slot and period: its oldest read (the others wait on the same ranks).
    if (!queue.empty() && warnings &&
        StallWarningDue(stall, queue.front().since, now, &queue.front().stall_warnings)) {
      const Read& r = queue.front();
      bool lost_only = false;
      warnings->push_back(
          "stall warning: under " + ConsistencyName(consistency_) + ", " +
          std::to_string(queue.size()) + " read(s) of " + TensorOfKey(r.push.key) + " (" +
          WhereRead(server_id_, r.push) + "), the oldest from worker " +
          std::to_string(r.push.sender) + " at step " + std::to_string(r.push.step) +
          ", have waited " + WholeSeconds(SecondsSince(r.since, now)) + " s for " +
          Behind(it->first, r.push.step, &lost_only) + " to reach step " +
          std::to_string(Needed(r.push.step)) + " (alive, slow; the job waits on, "
          "TFPS_STALL_SHUTDOWN ends it)");
    }
    it = queue.empty() ? waiting_.erase(it) : std::next(it);
  }
  return out;
}

std::vector<ClockTable::Failed> ClockTable::OnWorkerLost(int rank, const std::string& why) {
  lost_[rank] = why;
  std::vector<Failed> failed;
  std::vector<Slot> slots;
  for (const auto& w : waiting_) slots.push_back(w.first);
  for (const Slot& slot : slots) {
    std::vector<Read> ready;  // none can become ready by a loss; kept for the signature
    Ready(slot, &ready, &failed);
    for (Read& r : ready) Wait(r);
  }
  return failed;
}

}  // namespace tfps

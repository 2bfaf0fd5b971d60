#include "ps_server/liveness.h"

#include <algorithm>

namespace tfps {

Liveness::Liveness(double timeout_s)
    : timeout_s_(timeout_s),
      limit_s_(2 * timeout_s + 1),
      interval_(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(std::max(0.05, timeout_s / 4)))) {}

void Liveness::Watch(const std::string& identity, Clock::time_point now) {
  watched_[identity] = Watched{now, false};
}

void Liveness::Forget(const std::string& identity) { watched_.erase(identity); }

std::vector<std::string> Liveness::DuePings(Clock::time_point now, uint64_t* sequence) {
  std::vector<std::string> due;
  if (watched_.empty() || now - last_ping_ < interval_) return due;
  last_ping_ = now;
  *sequence = ++sequence_;
  for (const auto& member : watched_) due.push_back(member.first);
  return due;
}

void Liveness::OnPong(const std::string& identity, Clock::time_point now) {
  auto it = watched_.find(identity);
  if (it != watched_.end()) it->second = Watched{now, true};
}

std::vector<std::pair<std::string, double>> Liveness::TakeSilent(Clock::time_point now) {
  std::vector<std::pair<std::string, double>> silent;
  for (auto it = watched_.begin(); it != watched_.end();) {
    const double quiet = std::chrono::duration<double>(now - it->second.last_answer).count();
    if (it->second.answered && quiet > limit_s_) {
      silent.emplace_back(it->first, quiet);
      it = watched_.erase(it);
    } else {
      ++it;
    }
  }
  return silent;
}

}  // namespace tfps

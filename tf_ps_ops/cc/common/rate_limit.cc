#include "tf_ps_ops/cc/common/rate_limit.h"

namespace tfps {

PeerRateLimiter::PeerRateLimiter(double interval_s, int burst, size_t max_peers)
    : interval_(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(interval_s))),
      burst_(burst),
      max_peers_(max_peers) {}

PeerRateLimiter::Entry& PeerRateLimiter::EntryOf(const std::string& peer, Clock::time_point now) {
  auto it = peers_.find(peer);
  if (it != peers_.end()) return it->second;
  if (peers_.size() >= max_peers_) {
    for (auto e = peers_.begin(); e != peers_.end();) {
      e = now - e->second.start >= interval_ ? peers_.erase(e) : std::next(e);
    }
  }
  // Still full: every newcomer shares the budget of one name no routing id can take (ids
  // never start with a NUL byte; ZeroMQ reserves that for its generated ones, which are 5
  // bytes long).
  const std::string key = peers_.size() >= max_peers_ ? std::string("\0others", 7) : peer;
  Entry& entry = peers_[key];
  if (entry.passed == 0 && entry.held == 0) entry.start = now;
  return entry;
}

bool PeerRateLimiter::Allow(const std::string& peer, uint64_t* suppressed,
                            Clock::time_point now) {
  Entry& e = EntryOf(peer, now);
  if (now - e.start >= interval_) {
    e.start = now;
    e.passed = 0;
  }
  if (e.passed >= burst_) {
    ++e.held;
    return false;
  }
  ++e.passed;
  *suppressed = e.held;
  e.held = 0;
  return true;
}

std::string SuppressedNote(uint64_t suppressed) {
  if (suppressed == 0) return "";
  return " (" + std::to_string(suppressed) + " more from this peer suppressed)";
}

}  // namespace tfps

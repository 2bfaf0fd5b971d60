// What a misbehaving peer makes a role do on its behalf (log a line, send an error reply)
// is rate-limited per peer, so a client that floods garbage costs neither memory (replies
// it never reads) nor log space: the first `burst` events of a peer in each interval pass,
// the rest are only counted, and the next event that passes says how many were held back.
#ifndef TFPS_CC_COMMON_RATE_LIMIT_H_
#define TFPS_CC_COMMON_RATE_LIMIT_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>

namespace tfps {

class PeerRateLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  // At most `max_peers` peers are told apart (a flood of new connections cannot grow the
  // table): beyond that, peers whose interval has ended are forgotten, and if none has,
  // the newcomers share one budget.
  explicit PeerRateLimiter(double interval_s = 10.0, int burst = 10, size_t max_peers = 1024);

  // Whether this event of `peer` may be acted on. When it may, *suppressed is the number
  // of this peer's events held back since the last one that passed.
  bool Allow(const std::string& peer, uint64_t* suppressed, Clock::time_point now = Clock::now());

 private:
  struct Entry {
    Clock::time_point start;  // of the current interval
    int passed = 0;           // events passed in it
    uint64_t held = 0;        // events held back since the last that passed
  };
  Entry& EntryOf(const std::string& peer, Clock::time_point now);

  const Clock::duration interval_;
  const int burst_;
  const size_t max_peers_;
  std::unordered_map<std::string, Entry> peers_;
};

// " (N more from this peer suppressed)" for a log line, or "" when N is 0.
std::string SuppressedNote(uint64_t suppressed);

}  // namespace tfps

#endif  // TFPS_CC_COMMON_RATE_LIMIT_H_

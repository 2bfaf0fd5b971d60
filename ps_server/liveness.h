// The scheduler's application heartbeats (wire kPing / kPong, cluster/notice.h): which
// members to ping now, and which stayed silent past the limit. ZeroMQ's heartbeats only
// prove that a member's libzmq I/O thread lives; a member whose serving thread hangs (a
// worker's engine thread, a server's I/O thread) still answers those. A member is pinged
// every quarter of TFPS_HEARTBEAT_TIMEOUT and counts as hung after 2 x TFPS_HEARTBEAT_TIMEOUT
// + 1 s without an answer: later than ZeroMQ's heartbeat (TFPS_HEARTBEAT_TIMEOUT + its 1 s
// interval) finds a stopped or vanished process, which it names more precisely.
// Owned by the scheduler's thread; no locking.
#ifndef TFPS_PS_SERVER_LIVENESS_H_
#define TFPS_PS_SERVER_LIVENESS_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tfps {

class Liveness {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Liveness(double timeout_s);

  // Starts pinging `identity`. Its silence counts only from its first answer, so that a
  // member still starting (a server restoring a large checkpoint) is not taken for hung.
  void Watch(const std::string& identity, Clock::time_point now);
  void Forget(const std::string& identity);
  // The members to ping now (every interval), and the sequence number to send them.
  std::vector<std::string> DuePings(Clock::time_point now, uint64_t* sequence);
  // A member answered (any sequence number: an answer proves its thread ran).
  void OnPong(const std::string& identity, Clock::time_point now);
  // Members silent for longer than the timeout, with how long, in seconds; they are
  // forgotten (reported once).
  std::vector<std::pair<std::string, double>> TakeSilent(Clock::time_point now);
  double timeout_s() const { return timeout_s_; }  // TFPS_HEARTBEAT_TIMEOUT
  double limit_s() const { return limit_s_; }      // silence that counts as hung

 private:
  const double timeout_s_;
  const double limit_s_;
  const Clock::duration interval_;
  struct Watched {
    Clock::time_point last_answer;
    bool answered = false;
  };
  std::map<std::string, Watched> watched_;
  Clock::time_point last_ping_;
  uint64_t sequence_ = 0;
};

}  // namespace tfps

#endif  // TFPS_PS_SERVER_LIVENESS_H_

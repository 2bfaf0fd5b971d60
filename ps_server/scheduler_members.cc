// The scheduler's view of members lost (scheduler.h): a connection closed without a
// goodbye, a member's own notice of failure, a member whose serving thread stopped answering
// the pings; each is logged and told to every other member.
#include <cstdint>
#include <cstdio>
#include <string>

#include "ps_server/scheduler.h"
#include "tf_ps_ops/cc/cluster/notice.h"
#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/common/metrics.h"

namespace tfps {

void Scheduler::OnDisconnect(int fd) {
  for (auto it = workers_.begin(); it != workers_.end();) {
    Member& w = it->second;
    if (w.fd != fd || w.done) {
      ++it;
      continue;
    }
    const std::string name = NameOf(w.identity);
    if (!ready_) {  // its place is free again: a restart may take it
      TFPS_LOG(Warning) << name << " disconnected before the cluster was complete; its rank "
                        << "is free again";
      CountMembership(-1);
      it = workers_.erase(it);
      continue;
    }
    const std::string why = name + " is gone: it disconnected from the scheduler without "
                                   "shutting down (did the process die or was it stopped?)";
    TFPS_LOG(Error) << why;
    w.fd = -1;
    w.done = true;
    CountMembership(-1);
    ++lost_workers_;
    if (failure_.empty()) failure_ = why;
    TellMembers(Code::kUnavailable, why, w.identity);
    ++it;
  }
  for (auto it = servers_.begin(); it != servers_.end();) {
    if (it->fd != fd || it->done) {
      ++it;
      continue;
    }
    const std::string name = NameOf(it->identity);
    if (!ready_) {
      TFPS_LOG(Warning) << name << " disconnected before the cluster was complete; its place "
                        << "is free again";
      CountMembership(-1);
      it = servers_.erase(it);
      continue;
    }
    const std::string why = name + " is gone: it disconnected from the scheduler without "
                                   "shutting down (did the process die or was it stopped?)";
    TFPS_LOG(Error) << why;
    it->fd = -1;
    it->done = true;
    CountMembership(-1);
    if (failure_.empty()) failure_ = why;
    TellMembers(Code::kUnavailable, why, it->identity);
    ++it;
  }
}

void Scheduler::OnNotice(const std::string& identity, Code code, const std::string& text) {
  const std::string name = NameOf(identity);
  if (name.empty()) {
    Refuse(identity, Code::kFailedPrecondition, "only a registered member may send notices",
           "a notice");
    return;
  }
  const std::string told = name + (code == Code::kOk ? " warns: " : " failed: ") + text;
  if (code == Code::kOk) {
    uint64_t suppressed = 0;  // a member may warn often (a checkpoint failing every step)
    if (!limiter_.Allow(identity, &suppressed)) return;
    TFPS_LOG(Warning) << told << SuppressedNote(suppressed);
  } else {
    TFPS_LOG(Error) << told;
    if (failure_.empty()) failure_ = told;
  }
  TellMembers(code, told, identity);
  if (code == Code::kOk) return;
  // It exits now: its disconnect is no second failure to tell.
  for (auto& w : workers_) {
    if (w.second.identity == identity) w.second.done = true;
  }
  for (Member& m : servers_) {
    if (m.identity == identity) m.done = true;
  }
}

void Scheduler::TellMembers(Code code, const std::string& text, const std::string& about) {
  if (code != Code::kOk) metrics::errors.Add();
  NoticeAbout who;
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (servers_[i].identity == about) who = NoticeAbout{Role::kServer, static_cast<int>(i)};
  }
  for (const auto& w : workers_) {
    if (w.second.identity == about) who = NoticeAbout{Role::kWorker, w.first};
  }
  auto tell = [&](const Member& m) {
    if (m.done || m.identity == about) return;
    Status s = RelayNotice(router_, m.identity, code, who, text);
    if (!s.ok()) TFPS_LOG(Warning) << "could not tell " << NameOf(m.identity) << ": " << s.message();
  };
  for (const Member& m : servers_) tell(m);
  for (const auto& w : workers_) tell(w.second);
}

bool Scheduler::IsMemberConnection(int fd) const {
  for (const Member& m : servers_) {
    if (m.fd == fd) return true;
  }
  for (const auto& w : workers_) {
    if (w.second.fd == fd) return true;
  }
  return false;
}
namespace {

std::string FormatSeconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", seconds);
  return text;
}

}  // namespace

void Scheduler::CheckLiveness() {
  if (config_.heartbeat_timeout_s <= 0) return;
  const auto now = Liveness::Clock::now();
  uint64_t sequence = 0;
  for (const std::string& identity : liveness_.DuePings(now, &sequence)) {
    (void)SendPing(router_, identity, sequence);  // a full queue: the silence will tell
  }
  for (const auto& silent : liveness_.TakeSilent(now)) OnSilent(silent.first, silent.second);
}

void Scheduler::OnSilent(const std::string& identity, double seconds) {
  Member* member = nullptr;
  bool worker = false;
  for (auto& w : workers_) {
    if (w.second.identity == identity) member = &w.second, worker = true;
  }
  for (Member& s : servers_) {
    if (s.identity == identity) member = &s;
  }
  if (member == nullptr || member->done) return;
  char quiet[32];
  std::snprintf(quiet, sizeof(quiet), "%.1f", seconds);
  const std::string why =
      NameOf(identity) + " is hung: it has not answered the scheduler for " + quiet +
      " s (2 x TFPS_HEARTBEAT_TIMEOUT=" + FormatSeconds(liveness_.timeout_s()) +
      " s, + 1 s) although its connection is open: its " +
      (worker ? "engine thread" : "I/O thread or a summation thread (its log says which)") +
      " is stuck (a debugger, a deadlock?)";
  TFPS_LOG(Error) << why;
  metrics::scheduler_lost_members.Add();
  member->done = true;
  if (worker) ++lost_workers_;
  if (failure_.empty()) failure_ = why;
  TellMembers(Code::kUnavailable, why, identity);
}

}  // namespace tfps

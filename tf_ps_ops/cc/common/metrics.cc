#include "tf_ps_ops/cc/common/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

namespace tfps {

namespace {

std::atomic<Metric*> g_head{nullptr};  // every metric, newest first (constant-initialised)

// The process's labels, set once when its role starts (before anything serves metrics).
std::mutex g_role_mu;
uint8_t g_role = kEveryRole;
std::string g_common_labels;  // role="worker",rank="3"

std::string Series(const char* family, const char* suffix, const std::string& common,
                   const char* own, const std::string& extra) {
  std::string s = std::string(family) + suffix + "{" + common;
  if (own[0] != '\0') s += std::string(",") + own;
  if (!extra.empty()) s += "," + extra;
  return s + "} ";
}

std::string FormatDouble(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

// Resident memory from /proc/self/statm (the second field, in pages); 0 where unreadable.
int64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

}  // namespace

Metric::Metric(const char* family, const char* labels, const char* type, const char* help,
               uint8_t roles)
    : family_(family), labels_(labels), type_(type), help_(help), roles_(roles) {
  next_ = g_head.load(std::memory_order_relaxed);
  while (!g_head.compare_exchange_weak(next_, this, std::memory_order_release,
                                       std::memory_order_relaxed)) {
  }
}

void Counter::RaiseTo(uint64_t v) {
  uint64_t seen = value_.load(std::memory_order_relaxed);
  while (seen < v && !value_.compare_exchange_weak(seen, v, std::memory_order_relaxed)) {
  }
}

void Counter::RenderSamples(const std::string& common, std::string* out) const {
  *out += Series(family(), "", common, labels(), "") + std::to_string(value()) + "\n";
}

void Gauge::RenderSamples(const std::string& common, std::string* out) const {
  *out += Series(family(), "", common, labels(), "") + std::to_string(value()) + "\n";
}

void Histogram::Observe(double seconds) {
  if (!(seconds >= 0)) seconds = 0;  // a clock step back, or NaN
  const auto it = std::lower_bound(kBounds.begin(), kBounds.end(), seconds);
  if (it != kBounds.end()) buckets_[it - kBounds.begin()].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

// Buckets are read one by one while others may add: a scrape can see `count` a few
// observations ahead of the buckets; +Inf is `count`, so the buckets stay monotonic.
void Histogram::RenderSamples(const std::string& common, std::string* out) const {
  const uint64_t count = this->count();
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative = std::min(count, cumulative + buckets_[i].load(std::memory_order_relaxed));
    const std::string le = "le=\"" + FormatDouble(kBounds[i]) + "\"";
    *out += Series(family(), "_bucket", common, labels(), le) + std::to_string(cumulative) + "\n";
  }
  *out += Series(family(), "_bucket", common, labels(), "le=\"+Inf\"") +
          std::to_string(count) + "\n";
  *out += Series(family(), "_sum", common, labels(), "") + FormatDouble(sum_seconds()) + "\n";
  *out += Series(family(), "_count", common, labels(), "") + std::to_string(count) + "\n";
}

void SetMetricsRole(uint8_t role, const std::string& name, int rank) {
  std::lock_guard<std::mutex> lock(g_role_mu);
  g_role = role;
  g_common_labels = "role=\"" + name + "\"";
  if (rank >= 0) g_common_labels += ",rank=\"" + std::to_string(rank) + "\"";
}

std::string RenderMetrics() {
  uint8_t role;
  std::string common;
  {
    std::lock_guard<std::mutex> lock(g_role_mu);
    role = g_role;
    common = g_common_labels.empty() ? "role=\"unknown\"" : g_common_labels;
  }
  // Group the series by family (the list holds them newest first), in name order.
  std::map<std::string, std::vector<const Metric*>> families;
  for (const Metric* m = g_head.load(std::memory_order_acquire); m != nullptr; m = m->next()) {
    if ((m->roles() & role) != 0) families[m->family()].push_back(m);
  }
  std::string out;
  for (auto& [family, series] : families) {
    std::reverse(series.begin(), series.end());  // declaration order
    out += "# HELP " + family + " " + series.front()->help() + "\n";
    out += "# TYPE " + family + " " + series.front()->type() + "\n";
    for (const Metric* m : series) m->RenderSamples(common, &out);
  }
  out += "# HELP process_resident_memory_bytes Resident memory of this process.\n";
  out += "# TYPE process_resident_memory_bytes gauge\n";
  out += "process_resident_memory_bytes{" + common + "} " + std::to_string(ResidentBytes()) + "\n";
  return out;
}

namespace metrics {

constexpr uint8_t kW = kWorkerRole, kS = kServerRole, kC = kSchedulerRole, kAll = kEveryRole;

Counter worker_steps("tfps_worker_steps_total", "",
                     "Training steps: the most push_pull calls any one tensor name completed "
                     "(a gradient is reduced once a step).", kW);
Counter worker_push_pulls("tfps_worker_push_pulls_total", "",
                          "push_pull (and allreduce, broadcast) calls completed, every tensor.",
                          kW);
Histogram worker_push_pull_seconds("tfps_worker_push_pull_seconds", "",
                                   "Time from a push_pull's enqueue to its answer, in seconds.",
                                   kW);
Counter worker_bytes_sent_server("tfps_worker_sent_bytes_total", "peer=\"server\"",
                                 "Payload bytes this worker sent, by the kind of peer.", kW);
Counter worker_bytes_sent_worker("tfps_worker_sent_bytes_total", "peer=\"worker\"", "", kW);
Counter worker_bytes_received_server("tfps_worker_received_bytes_total", "peer=\"server\"",
                                     "Payload bytes this worker received, by the kind of peer.",
                                     kW);
Counter worker_bytes_received_worker("tfps_worker_received_bytes_total", "peer=\"worker\"", "",
                                     kW);
Gauge worker_partitions_in_flight("tfps_worker_partitions_in_flight", "",
                                  "Partitions sent to the servers whose answer is awaited.", kW);
Gauge worker_send_queue("tfps_worker_send_queue_partitions", "",
                        "Partitions waiting for scheduling credit (TFPS_SCHEDULING_CREDIT).", kW);
Gauge worker_request_queue("tfps_worker_request_queue", "",
                           "Requests the TF kernels queued that the engine thread has not taken.",
                           kW);

Counter server_pushes("tfps_server_pushes_total", "", "Pushes (partitions) received.", kS);
Counter server_rounds("tfps_server_rounds_total", "",
                      "Rounds completed: a partition's step summed over every worker and answered.",
                      kS);
Counter server_bytes_received("tfps_server_received_bytes_total", "peer=\"worker\"",
                              "Bytes this server received (every frame), by the kind of peer.", kS);
Counter server_bytes_sent("tfps_server_sent_bytes_total", "peer=\"worker\"",
                          "Payload bytes this server answered with, by the kind of peer.", kS);
Gauge server_summation_queue("tfps_server_summation_queue", "",
                             "Pushes, joins and losses queued for the summation threads.", kS);
Gauge server_push_bytes_held("tfps_server_push_bytes_held", "",
                             "Bytes of pushes held unanswered, counted against "
                             "TFPS_SERVER_PUSH_BYTES.", kS);
Gauge server_push_bytes_limit("tfps_server_push_bytes_limit", "",
                              "TFPS_SERVER_PUSH_BYTES as this server applies it.", kS);

Counter scheduler_registrations("tfps_scheduler_registrations_total", "",
                                "Servers and workers that registered.", kC);
Counter scheduler_departures("tfps_scheduler_departures_total", "",
                             "Members that disconnected.", kC);
Counter scheduler_lost_members("tfps_scheduler_lost_members_total", "",
                               "Members declared dead (silent past TFPS_HEARTBEAT_TIMEOUT).", kC);
Gauge scheduler_members("tfps_scheduler_members", "", "Members registered and connected.", kC);

Counter errors("tfps_errors_total", "",
               "Errors: failed calls (worker), error replies (server), failures told (scheduler).",
               kAll);
Counter stalls("tfps_stalls_total", "", "Waits reported as stalled.", kAll);
Counter membership_changes("tfps_membership_changes_total", "",
                           "Members that joined or left, as this process saw them.", kAll);
Counter metrics_scrapes("tfps_metrics_scrapes_total", "", "Requests the metrics port answered.",
                        kAll);

}  // namespace metrics

}  // namespace tfps

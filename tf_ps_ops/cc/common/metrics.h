// Counters, gauges and histograms every role keeps, and their Prometheus text (docs/metrics.md).
//
// Lock-free: each metric is a few atomics, updated with relaxed adds from any thread, and a
// process-wide list (filled at static initialisation, one compare-and-swap per metric) that
// Render() walks. Every metric is declared here, in `namespace metrics`, so that the one
// table of names is this file; a call site writes `metrics::worker_steps.Add()`.
#ifndef TFPS_CC_COMMON_METRICS_H_
#define TFPS_CC_COMMON_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace tfps {

// Which roles render a metric (a worker does not show the server's counters as zeros).
enum MetricRoles : uint8_t {
  kWorkerRole = 1,
  kServerRole = 2,
  kSchedulerRole = 4,
  kEveryRole = 7,
};

class Metric {
 public:
  // `family` is the Prometheus name; `labels` this series' own labels (`peer="server"`) or
  // "". Series of one family share `help` and `type` and are rendered together.
  Metric(const char* family, const char* labels, const char* type, const char* help,
         uint8_t roles);
  virtual ~Metric() = default;
  Metric(const Metric&) = delete;
  Metric& operator=(const Metric&) = delete;

  const char* family() const { return family_; }
  const char* labels() const { return labels_; }
  const char* type() const { return type_; }
  const char* help() const { return help_; }
  uint8_t roles() const { return roles_; }
  const Metric* next() const { return next_; }
  // Appends this series' sample line(s); `common` are the process's labels (role, rank).
  virtual void RenderSamples(const std::string& common, std::string* out) const = 0;

 private:
  const char* family_;
  const char* labels_;
  const char* type_;
  const char* help_;
  uint8_t roles_;
  Metric* next_ = nullptr;
};

class Counter : public Metric {
 public:
  Counter(const char* family, const char* labels, const char* help, uint8_t roles)
      : Metric(family, labels, "counter", help, roles) {}
  void Add(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  // For a count kept elsewhere as a maximum (a worker's steps): never moves down.
  void RaiseTo(uint64_t v);
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }
  void RenderSamples(const std::string& common, std::string* out) const override;

 private:
  std::atomic<uint64_t> value_{0};
};

class Gauge : public Metric {
 public:
  Gauge(const char* family, const char* labels, const char* help, uint8_t roles)
      : Metric(family, labels, "gauge", help, roles) {}
  void Set(int64_t v) { value_.store(v, std::memory_order_relaxed); }
  void Add(int64_t n) { value_.fetch_add(n, std::memory_order_relaxed); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }
  void RenderSamples(const std::string& common, std::string* out) const override;

 private:
  std::atomic<int64_t> value_{0};
};

// Durations in seconds, in fixed buckets from 100 us to 60 s.
class Histogram : public Metric {
 public:
  static constexpr std::array<double, 15> kBounds = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,   0.1,     0.25,   0.5,   1.0,    5.0,   60.0};
  Histogram(const char* family, const char* labels, const char* help, uint8_t roles)
      : Metric(family, labels, "histogram", help, roles) {}
  void Observe(double seconds);
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum_seconds() const { return sum_ns_.load(std::memory_order_relaxed) * 1e-9; }
  void RenderSamples(const std::string& common, std::string* out) const override;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size()> buckets_{};  // not cumulative
  std::atomic<uint64_t> count_{0}, sum_ns_{0};
};

// The process's role and rank, added as labels to every series: "worker", 3 (-1: none).
void SetMetricsRole(uint8_t role, const std::string& name, int rank);
// The whole exposition (text format 0.0.4) of this process's role.
std::string RenderMetrics();

namespace metrics {
// Workers (the engine).
extern Counter worker_steps;        // the most push_pulls any one tensor name completed
extern Counter worker_push_pulls;    // push_pull calls completed (every tensor)
extern Histogram worker_push_pull_seconds;
extern Counter worker_bytes_sent_server, worker_bytes_sent_worker;
extern Counter worker_bytes_received_server, worker_bytes_received_worker;
extern Gauge worker_partitions_in_flight;  // sent, answer awaited
extern Gauge worker_send_queue;           // partitions waiting for scheduling credit
extern Gauge worker_request_queue;        // requests the kernels queued, not yet taken
// Servers.
extern Counter server_pushes, server_rounds;
extern Counter server_bytes_received, server_bytes_sent;
extern Gauge server_summation_queue;   // pushes queued for the summation threads
extern Gauge server_push_bytes_held, server_push_bytes_limit;
// The scheduler.
extern Counter scheduler_registrations, scheduler_departures, scheduler_lost_members;
extern Gauge scheduler_members;
// Every role.
extern Counter errors;  // failed calls (worker), error replies (server), failures told
extern Counter stalls;  // waits reported as stalled (the stall warnings increment it)
extern Counter membership_changes;  // members joined or left, as this process saw them
extern Counter metrics_scrapes;
}  // namespace metrics

}  // namespace tfps

#endif  // TFPS_CC_COMMON_METRICS_H_

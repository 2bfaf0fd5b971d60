// The engine's C functions (declared, for the compiler and for Python, in c_api.h).
#include "tf_ps_ops/cc/engine/c_api.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "tf_ps_ops/cc/common/metrics.h"
#include "tf_ps_ops/cc/engine/engine.h"
#include "tf_ps_ops/cc/engine/join.h"
#include "tf_ps_ops/cc/engine/timeline_control.h"
#include "tf_ps_ops/cc/transport/metrics_http.h"

namespace {

void CopyError(const std::string& message, char* err, int err_len) {
  if (err == nullptr || err_len <= 0) return;
  std::strncpy(err, message.c_str(), static_cast<size_t>(err_len) - 1);
  err[err_len - 1] = '\0';
}

}  // namespace

extern "C" {

int tfps_init(const char* scheduler_host, int scheduler_port, int rank, int size,
              int num_servers, char* err, int err_len) {
  tfps::EngineOptions options;
  options.scheduler_host = scheduler_host == nullptr ? "" : scheduler_host;
  options.scheduler_port = scheduler_port;
  options.rank = rank;
  options.size = size;
  options.num_servers = num_servers;
  tfps::Status s = tfps::Engine::Get().Init(options);
  if (s.ok()) return 0;
  CopyError(s.message(), err, err_len);
  return static_cast<int>(s.code());
}

void tfps_shutdown(void) { tfps::Engine::Get().Shutdown(); }

int tfps_hierarchical(void) { return tfps::Engine::Get().hierarchical() ? 1 : 0; }

int tfps_join(char* err, int err_len) {
  int last = -1;
  tfps::Status s = tfps::JoinJob(tfps::Engine::Get(), &last);
  if (s.ok()) return last;
  CopyError(s.message(), err, err_len);
  return -std::max(1, static_cast<int>(s.code()));
}
int tfps_is_initialized(void) { return tfps::Engine::Get().initialized() ? 1 : 0; }
int tfps_rank(void) { return tfps::Engine::Get().rank(); }
int tfps_size(void) { return tfps::Engine::Get().size(); }
int tfps_local_rank(void) { return tfps::Engine::Get().local_rank(); }
int tfps_local_size(void) { return tfps::Engine::Get().local_size(); }
int tfps_num_servers(void) { return tfps::Engine::Get().num_servers(); }
unsigned long long tfps_bytes_sent(void) { return tfps::Engine::Get().stats().bytes_sent; }
unsigned long long tfps_bytes_received(void) { return tfps::Engine::Get().stats().bytes_received; }
unsigned long long tfps_peer_bytes_sent(void) { return tfps::Engine::Get().stats().peer_bytes_sent; }
unsigned long long tfps_messages_sent(void) { return tfps::Engine::Get().stats().messages_sent; }
unsigned long long tfps_parts_sent(void) { return tfps::Engine::Get().stats().parts_sent; }
unsigned long long tfps_peer_bytes_received(void) {
  return tfps::Engine::Get().stats().peer_bytes_received;
}
unsigned long long tfps_codec_raw_bytes(void) { return tfps::Engine::Get().stats().codec_raw_bytes; }
unsigned long long tfps_codec_encoded_bytes(void) {
  return tfps::Engine::Get().stats().codec_encoded_bytes;
}
int tfps_set_tuning(long long fusion_bytes, long long scheduling_credit, char* err,
                    int err_len) {
  tfps::Status s = tfps::Engine::Get().SetTuning(fusion_bytes, scheduling_credit);
  if (s.ok()) return 0;
  CopyError(s.message(), err, err_len);
  return static_cast<int>(s.code());
}
int tfps_set_cycle_us(long long cycle_us, char* err, int err_len) {
  tfps::Status s = tfps::Engine::Get().SetCycle(cycle_us);
  if (s.ok()) return 0;
  CopyError(s.message(), err, err_len);
  return static_cast<int>(s.code());
}
long long tfps_cycle_us(void) { return tfps::Engine::Get().CycleUs(); }
int tfps_tuning(long long* fusion_bytes, long long* scheduling_credit) {
  const auto [fusion, credit] = tfps::Engine::Get().Tuning();
  if (fusion_bytes != nullptr) *fusion_bytes = fusion;
  if (scheduling_credit != nullptr) *scheduling_credit = credit;
  return fusion < 0 ? -1 : 0;
}
int tfps_metrics_text(char* out, int out_len) {
  const std::string text = tfps::RenderMetrics();
  if (out != nullptr && out_len > 0) {
    const size_t n = std::min(text.size(), static_cast<size_t>(out_len) - 1);
    std::memcpy(out, text.data(), n);
    out[n] = '\0';
  }
  return static_cast<int>(text.size());
}
int tfps_metrics_port(void) { return tfps::MetricsPort(); }
unsigned long long tfps_codec_micros(void) { return tfps::Engine::Get().stats().codec_micros; }

int tfps_start_timeline(const char* path, int mark_cycles, char* err, int err_len) {
  tfps::Status s = tfps::StartTimeline(path == nullptr ? "" : path, mark_cycles != 0);
  if (s.ok()) return 0;
  CopyError(s.message(), err, err_len);
  return static_cast<int>(s.code());
}

int tfps_stop_timeline(char* err, int err_len) {
  tfps::Status s = tfps::StopTimeline();
  if (s.ok()) return 0;
  CopyError(s.message(), err, err_len);
  return static_cast<int>(s.code());
}

}  // extern "C"

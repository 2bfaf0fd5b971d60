// ps_server: the parameter server binary, and the scheduler (rendezvous) role.
// Flags fall back to BytePS/ps-lite's DMLC_* variables so BytePS launch scripts work.
#include <malloc.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "ps_server/exit_codes.h"
#include "ps_server/scheduler.h"
#include "ps_server/shard_server.h"
#include "tf_ps_ops/cc/common/config.h"
#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/common/metrics.h"
#include "tf_ps_ops/cc/common/version.h"
#include "tf_ps_ops/cc/transport/auth.h"
#include "tf_ps_ops/cc/transport/connection_limits.h"
#include "tf_ps_ops/cc/transport/metrics_http.h"

namespace {

std::atomic<bool> g_stop{false};

std::atomic<int> g_signal{0};

void OnSignal(int sig) {
  g_signal = sig;
  g_stop = true;
}

// Run()'s result as the process's exit code: a stop by signal before every worker finished
// is not a success (tfps-run and cluster managers read the code), and the log says so.
int ExitCode(int run_result) {
  if (run_result != tfps::kStoppedMidJob) return run_result;
  const int sig = g_signal.load();
  TFPS_LOG(Warning) << "stopped by " << (sig == SIGINT ? "SIGINT" : "SIGTERM")
                    << " before every worker finished; exiting with " << 128 + sig;
  return 128 + sig;
}

const char kUsage[] =
    "usage:\n"
    "  ps_server --role scheduler --port P [--port-file F] --num-workers N --num-servers M\n"
    "  ps_server --role server --scheduler HOST:PORT [--port P] [--host H]\n"
    "            --num-workers N --num-servers M [--threads T]\n"
    "            [--checkpoint-dir D] [--checkpoint-every N]\n"
    "  both roles: [--bind ADDRESS] [--auth-key-file F] [--insecure]\n"
    "              (TFPS_BIND, TFPS_AUTH_KEY_FILE, TFPS_INSECURE=1: bind beyond loopback\n"
    "              without a key, which is refused otherwise)\n"
    "  ps_server --gen-key F    writes a new job key to F (mode 600) for TFPS_AUTH_KEY_FILE\n"
    "  ps_server --version      prints the version of tf_ps_ops it belongs to\n"
    "Unset flags come from DMLC_ROLE, DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT, DMLC_NUM_WORKER,\n"
    "DMLC_NUM_SERVER, DMLC_NODE_HOST and TFPS_SERVER_THREADS (see docs/env.md).\n";

int Fail(const std::string& message) {
  std::fprintf(stderr, "ps_server: %s\n%s", message.c_str(), kUsage);
  return 2;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

bool ParseInt(const std::string& text, int min, int* out) {
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < min || v > 65535 * 16) return false;
  *out = static_cast<int>(v);
  return true;
}

bool WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << port << "\n";
    if (!f.good()) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

int Main(int argc, char** argv);

}  // namespace

// No exception ends the process with an abort: what escapes a role is logged, exit 1.
int main(int argc, char** argv) {
  // Received pushes are fresh buffers of partition size (1 MB by default) every step.
  // glibc would return them to the kernel (mmap above its threshold, or a heap trim on
  // free) and page-fault them in again at the next step: 10-12% of a server's CPU at
  // 10 Gbit/s (benchmarks/RESULTS.md, "Shared memory to the local server"). Keep freed
  // memory for reuse instead: up to 256 MB of it, about one step of a large model's
  // gradients in flight. MALLOC_* environment variables still override (glibc reads
  // them first; mallopt only runs when they are not set).
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest: bigger ones are mmapped
  }
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr) mallopt(M_TRIM_THRESHOLD, 256 << 20);
  if (std::getenv("MALLOC_TOP_PAD_") == nullptr) mallopt(M_TOP_PAD, 16 << 20);
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    TFPS_LOG(Error) << "fatal: " << e.what();
    return 1;
  }
}

namespace {

using Flags = std::map<std::string, std::string>;

constexpr int kGoOn = -1;  // ParseArgs: no exit code yet

// Reads the --name value pairs into *flags. Returns kGoOn, or the exit code: 0 after
// --help or --version, 2 after an unexpected argument or an unknown flag.
int ParseArgs(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg == "--version") {
      std::printf("ps_server (tf_ps_ops) %s\n", tfps::kPackageVersion);
      return 0;
    }
    if (arg == "--insecure") {  // the one flag without a value
      setenv("TFPS_INSECURE", "1", 1);
      continue;
    }
    if (arg.rfind("--", 0) != 0 || i + 1 >= argc) return Fail("unexpected argument '" + arg + "'");
    (*flags)[arg.substr(2)] = argv[++i];
  }
  for (const auto& kv : *flags) {
    static const char* known[] = {"role", "port", "port-file", "scheduler", "host",
                                  "num-workers", "num-servers", "threads", "checkpoint-dir",
                                  "checkpoint-every", "bind", "auth-key-file", "gen-key"};
    bool ok = false;
    for (const char* k : known) ok = ok || kv.first == k;
    if (!ok) return Fail("unknown flag --" + kv.first);
  }
  return kGoOn;
}

// A flag's value, else the environment variable's (none when env is null).
std::string FlagOrEnv(const Flags& flags, const char* name, const char* env) {
  auto it = flags.find(name);
  if (it != flags.end()) return it->second;
  return env == nullptr ? std::string() : Env(env);
}

// Flags that are also environment variables: the config table parses and checks both.
void ExportEnvFlags(const Flags& flags) {
  static const std::pair<const char*, const char*> kExported[] = {
      {"threads", "TFPS_SERVER_THREADS"},   {"checkpoint-dir", "TFPS_CHECKPOINT_DIR"},
      {"bind", "TFPS_BIND"},                {"auth-key-file", "TFPS_AUTH_KEY_FILE"},
      {"checkpoint-every", "TFPS_CHECKPOINT_EVERY"}};
  for (const auto& [flag, env] : kExported) {
    auto it = flags.find(flag);
    if (it != flags.end()) setenv(env, it->second.c_str(), 1);
  }
}

int RunScheduler(const Flags& flags, int num_workers, int num_servers,
                 const tfps::Config& config) {
  int port = 0;
  const std::string port_text = FlagOrEnv(flags, "port", "DMLC_PS_ROOT_PORT");
  if (!port_text.empty() && !ParseInt(port_text, 0, &port)) return Fail("bad --port " + port_text);
  tfps::SetLogRole("scheduler");
  tfps::SetMetricsRole(tfps::kSchedulerRole, "scheduler", -1);
  std::unique_ptr<tfps::MetricsEndpoint> metrics;
  tfps::Status started = tfps::MetricsEndpoint::StartIfAsked(config, "the scheduler", &metrics);
  if (!started.ok()) return Fail(started.message());
  tfps::Scheduler scheduler(num_workers, num_servers, config);
  int bound = 0;
  tfps::Status s = scheduler.Bind(port, &bound);
  if (!s.ok()) return Fail(s.message());
  auto port_file = flags.find("port-file");
  if (port_file != flags.end() && !WritePortFile(port_file->second, bound)) {
    return Fail("cannot write --port-file " + port_file->second);
  }
  TFPS_LOG(Info) << "listening on port " << bound << " for " << num_servers << " server(s) and "
                 << num_workers << " worker(s)";
  return ExitCode(scheduler.Run(g_stop));
}

// The scheduler's address, from --scheduler HOST:PORT or DMLC_PS_ROOT_URI/_PORT. Returns
// kGoOn, or the exit code of a missing or malformed one.
int SchedulerAddress(const Flags& flags, std::string* host, int* port) {
  std::string port_text;
  auto given = flags.find("scheduler");
  if (given != flags.end()) {
    const std::string& a = given->second;
    const size_t colon = a.rfind(':');
    if (colon == std::string::npos) return Fail("--scheduler must be HOST:PORT, got '" + a + "'");
    *host = a.substr(0, colon);  // an IPv6 literal in brackets: [::1]:7000
    port_text = a.substr(colon + 1);
  } else {
    *host = Env("DMLC_PS_ROOT_URI");
    port_text = Env("DMLC_PS_ROOT_PORT");
  }
  if (host->empty() || !ParseInt(port_text, 1, port)) {
    return Fail("the scheduler address is missing: give --scheduler HOST:PORT or set "
                "DMLC_PS_ROOT_URI and DMLC_PS_ROOT_PORT");
  }
  return kGoOn;
}

int RunServer(const Flags& flags, int num_workers, int num_servers, const tfps::Config& config) {
  std::string sched_host;
  int sched_port = 0;
  const int bad_address = SchedulerAddress(flags, &sched_host, &sched_port);
  if (bad_address != kGoOn) return bad_address;
  int port = 0;
  const std::string port_text = FlagOrEnv(flags, "port", nullptr);
  if (!port_text.empty() && !ParseInt(port_text, 0, &port)) return Fail("bad --port " + port_text);
  tfps::SetLogRole("server");
  tfps::SetMetricsRole(tfps::kServerRole, "server", -1);  // its id once registered
  std::unique_ptr<tfps::MetricsEndpoint> metrics;
  tfps::Status started = tfps::MetricsEndpoint::StartIfAsked(config, "this server", &metrics);
  if (!started.ok()) {
    TFPS_LOG(Error) << started.message();
    return 1;
  }
  tfps::ShardServer server(num_workers, num_servers, config);
  tfps::Status s =
      server.Start(sched_host, sched_port, port, FlagOrEnv(flags, "host", "DMLC_NODE_HOST"));
  if (!s.ok()) {
    TFPS_LOG(Error) << s.message();
    return 1;
  }
  return ExitCode(server.Run(g_stop));
}

int Main(int argc, char** argv) {
  Flags flags;
  const int parsed = ParseArgs(argc, argv, &flags);
  if (parsed != kGoOn) return parsed;
  ExportEnvFlags(flags);
  if (flags.count("gen-key")) {
    tfps::Status made = tfps::WriteNewKeyFile(flags["gen-key"]);
    if (!made.ok()) return Fail(made.message());
    return 0;
  }

  tfps::RaiseDescriptorLimit();  // every role: connection_limits.h
  tfps::Config config;
  tfps::Status s = tfps::LoadConfig(&config);
  if (!s.ok()) return Fail(s.message());

  const std::string role = FlagOrEnv(flags, "role", "DMLC_ROLE");
  int num_workers = 0, num_servers = 0;
  if (!ParseInt(FlagOrEnv(flags, "num-workers", "DMLC_NUM_WORKER"), 1, &num_workers)) {
    return Fail("--num-workers (or DMLC_NUM_WORKER) must be a positive integer");
  }
  if (!ParseInt(FlagOrEnv(flags, "num-servers", "DMLC_NUM_SERVER"), 1, &num_servers)) {
    return Fail("--num-servers (or DMLC_NUM_SERVER) must be a positive integer");
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);

  if (role == "scheduler") return RunScheduler(flags, num_workers, num_servers, config);
  if (role != "server") return Fail("--role must be 'scheduler' or 'server', got '" + role + "'");
  return RunServer(flags, num_workers, num_servers, config);
}

}  // namespace

// ps_server: the parameter server binary, and the scheduler (rendezvous) role.
// Flags fall back to BytePS/ps-lite's DMLC_* variables so BytePS launch scripts work.
#include <malloc.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>

#include "ps_server/exit_codes.h"
#include "ps_server/scheduler.h"
#include "ps_server/shard_server.h"
#include "tf_ps_ops/cc/common/config.h"
#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/transport/auth.h"

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

int Main(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg == "--insecure") {  // the one flag without a value
      setenv("TFPS_INSECURE", "1", 1);
      continue;
    }
    if (arg.rfind("--", 0) != 0 || i + 1 >= argc) return Fail("unexpected argument '" + arg + "'");
    flags[arg.substr(2)] = argv[++i];
  }
  auto flag = [&](const char* name, const char* env) {
    auto it = flags.find(name);
    if (it != flags.end()) return it->second;
    return env == nullptr ? std::string() : Env(env);
  };
  for (const auto& kv : flags) {
    static const char* known[] = {"role", "port", "port-file", "scheduler", "host",
                                  "num-workers", "num-servers", "threads", "checkpoint-dir",
                                  "checkpoint-every", "bind", "auth-key-file", "gen-key"};
    bool ok = false;
    for (const char* k : known) ok = ok || kv.first == k;
    if (!ok) return Fail("unknown flag --" + kv.first);
  }
  // Flags that are also environment variables: the config table parses and checks both.
  if (flags.count("threads")) setenv("TFPS_SERVER_THREADS", flags["threads"].c_str(), 1);
  if (flags.count("checkpoint-dir")) {
    setenv("TFPS_CHECKPOINT_DIR", flags["checkpoint-dir"].c_str(), 1);
  }
  if (flags.count("gen-key")) {
    tfps::Status made = tfps::WriteNewKeyFile(flags["gen-key"]);
    if (!made.ok()) return Fail(made.message());
    return 0;
  }
  if (flags.count("bind")) setenv("TFPS_BIND", flags["bind"].c_str(), 1);
  if (flags.count("auth-key-file")) {
    setenv("TFPS_AUTH_KEY_FILE", flags["auth-key-file"].c_str(), 1);
  }
  if (flags.count("checkpoint-every")) {
    setenv("TFPS_CHECKPOINT_EVERY", flags["checkpoint-every"].c_str(), 1);
  }

  tfps::Config config;
  tfps::Status s = tfps::LoadConfig(&config);
  if (!s.ok()) return Fail(s.message());

  const std::string role = flag("role", "DMLC_ROLE");
  int num_workers = 0, num_servers = 0, port = 0;
  if (!ParseInt(flag("num-workers", "DMLC_NUM_WORKER"), 1, &num_workers)) {
    return Fail("--num-workers (or DMLC_NUM_WORKER) must be a positive integer");
  }
  if (!ParseInt(flag("num-servers", "DMLC_NUM_SERVER"), 1, &num_servers)) {
    return Fail("--num-servers (or DMLC_NUM_SERVER) must be a positive integer");
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);

  if (role == "scheduler") {
    const std::string port_text = flag("port", "DMLC_PS_ROOT_PORT");
    if (!port_text.empty() && !ParseInt(port_text, 0, &port)) return Fail("bad --port " + port_text);
    tfps::SetLogRole("scheduler");
    tfps::Scheduler scheduler(num_workers, num_servers, config);
    int bound = 0;
    s = scheduler.Bind(port, &bound);
    if (!s.ok()) return Fail(s.message());
    if (flags.count("port-file") && !WritePortFile(flags["port-file"], bound)) {
      return Fail("cannot write --port-file " + flags["port-file"]);
    }
    TFPS_LOG(Info) << "listening on port " << bound << " for " << num_servers << " server(s) and "
                   << num_workers << " worker(s)";
    return ExitCode(scheduler.Run(g_stop));
  }
  if (role != "server") return Fail("--role must be 'scheduler' or 'server', got '" + role + "'");

  std::string sched_host, sched_port_text;
  if (flags.count("scheduler")) {
    const std::string& a = flags["scheduler"];
    const size_t colon = a.rfind(':');
    if (colon == std::string::npos) return Fail("--scheduler must be HOST:PORT, got '" + a + "'");
    sched_host = a.substr(0, colon);  // an IPv6 literal in brackets: [::1]:7000
    sched_port_text = a.substr(colon + 1);
  } else {
    sched_host = Env("DMLC_PS_ROOT_URI");
    sched_port_text = Env("DMLC_PS_ROOT_PORT");
  }
  int sched_port = 0;
  if (sched_host.empty() || !ParseInt(sched_port_text, 1, &sched_port)) {
    return Fail("the scheduler address is missing: give --scheduler HOST:PORT or set "
                "DMLC_PS_ROOT_URI and DMLC_PS_ROOT_PORT");
  }
  const std::string port_text = flag("port", nullptr);
  if (!port_text.empty() && !ParseInt(port_text, 0, &port)) return Fail("bad --port " + port_text);
  tfps::SetLogRole("server");
  tfps::ShardServer server(num_workers, num_servers, config);
  s = server.Start(sched_host, sched_port, port, flag("host", "DMLC_NODE_HOST"));
  if (!s.ok()) {
    TFPS_LOG(Error) << s.message();
    return 1;
  }
  return ExitCode(server.Run(g_stop));
}

}  // namespace

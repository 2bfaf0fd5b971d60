#include "tf_ps_ops/cc/common/config.h"

#include <arpa/inet.h>
#include <sched.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <iomanip>

#include "tf_ps_ops/cc/common/logging.h"

namespace tfps {

const std::vector<ConfigEntry>& ConfigTable() {
  static const std::vector<ConfigEntry> table = {
      {"TFPS_TIMEOUT", "float", "120",
       "Seconds a wait on a member that has not proven alive yet may last: the rendezvous, "
       "connecting to the servers and peers, the hello, an elastic worker waiting for its "
       "place. Waits on members that are alive (a push_pull, a server waiting for a worker's "
       "push, join()) are bounded by TFPS_STALL_SHUTDOWN instead; a dead or stopped member "
       "fails them at once (docs/errors.md). At least 0.1; values above 2592000 (30 days) "
       "are used as 2592000, with a warning."},
      {"TFPS_STALL_WARNING", "float", "60",
       "While a collective waits on ranks that are alive but have not submitted it, every "
       "member logs a 'stall warning' every this many seconds, naming the tensor, the ranks "
       "that submitted it, the ranks missing and how long it has waited. 0: no warnings."},
      {"TFPS_STALL_SHUTDOWN", "float", "0",
       "Seconds such a stalled wait may last before it fails (and the job ends) with an error "
       "naming the tensor and the missing ranks. 0 (the default): never; a job is ended for a "
       "dead or stopped member, not for a slow one."},
      {"TFPS_HEARTBEAT_TIMEOUT", "float", "30",
       "Seconds without traffic or heartbeat after which a connection counts as dead (a host "
       "that vanished without closing its sockets); worker-to-worker connections carry no "
       "heartbeats, the scheduler's notice names a vanished worker to its peers. Also how long a member's serving thread "
       "(a worker's engine thread, a server's I/O thread) may leave the scheduler's pings "
       "unanswered, twice this plus 1 s, before it is named hung to everyone (application "
       "heartbeats, pinged every quarter of it). A server answers only while each of its "
       "summation threads progressed within this. At least 1; values above 6553.5 (the largest ZeroMQ can carry) are "
       "used as 6553.5, with a warning."},
      {"TFPS_PARTITION_BYTES", "int", "1048576",
       "Tensors are split into partitions of at most this many bytes; partitions are spread "
       "over the servers so one large tensor uses every server's link."},
      {"TFPS_SERVER_THREADS", "int", "2",
       "Summation threads per ps_server (keys are sharded over them)."},
      {"TFPS_IO_THREADS", "int", "0",
       "ZeroMQ I/O threads per worker and per ps_server: the threads that copy, frame and "
       "(with TFPS_AUTH_KEY_FILE) encrypt everything the process sends and receives. A "
       "worker pins its socket to each server and to each peer to these threads in turn, so "
       "its connections spread over them; a server's workers are placed by ZeroMQ as it "
       "accepts them, which may put workers that connect at the same instant on one thread "
       "(docs/security.md). 1 to 64; 0 (the default): min(4, max(1, cores / 4)), one per four "
       "cores, at most four: the cores stay the training's and the summation threads', and "
       "one thread moves about 3 GB of plain TCP per CPU-second; more help a keyed job, whose "
       "encryption costs each end about a CPU-second per GB. The scheduler keeps one."},
      {"TFPS_LOG_LEVEL", "string", "info", "debug, info, warning or error."},
      {"TFPS_LOG_TIMESTAMP", "int", "1",
       "1: every log line of the engine and ps_server starts with the UTC time, e.g. "
       "`2026-12-01 20:15:03.123456 [tfps worker 1] INFO: ...`; 0: without it (tfps-run "
       "--log-without-timestamp)."},
      {"TFPS_CHECKPOINT_DIR", "string", "",
       "ps_server: a directory (shared by all servers) where each summation thread writes its "
       "part of the server's PS-mode parameters and slots, and from which a server restores "
       "them at start. Empty: no server checkpoints. A restart needs the same number of "
       "servers and TFPS_SERVER_THREADS (docs/ps_mode.md, Checkpoints)."},
      {"TFPS_CHECKPOINT_EVERY", "int", "100",
       "ps_server: a summation thread writes its file each time all the parameters it has "
       "updated reach the same update count, a multiple of this (in BSP: every this many "
       "steps). 0: never (the directory is only restored from)."},
      {"TFPS_SCHEDULING_CREDIT", "int", "0",
       "Bytes of partitions a worker keeps in flight to the servers; the rest wait in "
       "priority order (layers nearer the input first). A partition counts until its "
       "server acknowledges receipt (not until the sum), so workers that start tensors in "
       "different orders cannot wait on each other. 0: no limit, send everything at once."},
      {"TFPS_FUSION_BYTES", "int", "262144",
       "Small partitions ready at the same time for the same server travel as one message "
       "(a batch) of up to this many payload bytes, and a server answers a worker's ready "
       "replies the same way; partitions larger than this travel alone. 0: no batches."},
      {"TFPS_MAX_MESSAGE_BYTES", "int", "268435456",
       "Largest message part (frame) any role accepts or announces, in bytes: a peer that "
       "sends a larger frame is disconnected before it is buffered, and a header whose "
       "element count stands for more (also a push that carries no data) is refused before "
       "anything is allocated. TFPS_PARTITION_BYTES and TFPS_FUSION_BYTES may not exceed it; "
       "an allgather's tensor (per worker) must fit in it."},
      {"TFPS_PEER_QUEUE_BYTES", "int", "1073741824",
       "Bytes of worker-to-worker data (allgather, alltoall, SFB, neighbour exchanges) a "
       "worker keeps queued for peers that have not read what it sent before, all peers "
       "together. Beyond it the worker starts no new peer collective until peers read; a "
       "peer that reads none of it for TFPS_TIMEOUT fails the collectives that wait on it "
       "with an error naming it. At least 65536."},
      {"TFPS_SERVER_PUSH_BYTES", "int", "0",
       "ps_server: bytes a server holds for its workers: pushes not answered yet (queued for "
       "its summation threads, or waiting in a round for the other workers; a push counts "
       "the larger of its payload and the reply it stands for) and replies not yet taken by "
       "their worker's connection. Beyond it, a push "
       "from a worker that holds at least its share (this / workers) fails at once with an "
       "error naming the worker and the tensor; the others' pushes are still taken, so a "
       "server holds at most about twice this. Shared-memory pushes do not count. At least "
       "TFPS_MAX_MESSAGE_BYTES. 0 (the default): a quarter of the machine's memory, at "
       "least 2 GiB."},
      {"TFPS_AUTH_KEY_FILE", "string", "",
       "A file holding the job's CURVE secret key (40 Z85 characters; `ps_server --gen-key "
       "FILE` writes one). With it every connection of every role is encrypted and "
       "authenticated (ZeroMQ CURVE + ZAP): a peer without the same key gets nothing and "
       "changes nothing (docs/security.md). Empty: no authentication, plain TCP."},
      {"TFPS_BIND", "string", "*",
       "The address every role binds its listening socket to: * (every IPv4 interface), an "
       "IPv4 address such as 127.0.0.1 (loopback only), an IPv6 address (::1 or [::1] for "
       "loopback, :: for every interface, IPv4 too), or an interface name. A role that binds "
       "anything but loopback without TFPS_AUTH_KEY_FILE refuses to start (anyone who "
       "reaches the port could join), unless TFPS_INSECURE=1."},
      {"TFPS_INSECURE", "int", "0",
       "1: a role may bind beyond loopback without TFPS_AUTH_KEY_FILE (plain TCP, a warning; "
       "for a trusted network or a measurement). 0: it refuses to start "
       "(`ps_server --insecure`, `tfps-run --insecure` set it)."},
      {"TFPS_METRICS_PORT", "int", "",
       "The TCP port where this process answers HTTP GET /metrics with its counters in the "
       "Prometheus text format (docs/metrics.md), bound to TFPS_BIND under the same rule as "
       "the other sockets (beyond loopback only with the job's key or TFPS_INSECURE=1). 0: a "
       "free port, logged. Unset: no metrics port. `tfps-run --metrics-port BASE` gives each "
       "process it starts BASE plus an offset."},
      {"TFPS_TIMELINE", "string", "",
       "Path of a Chrome-trace JSON timeline each worker writes at shutdown (%r becomes the "
       "rank): every tensor's queued / scheduled / push / server / pull / written stages "
       "(push ends when the server has the worker's last partition, server when the sum or "
       "update is ready; clocks of different hosts are assumed in sync)."},
      {"TFPS_COMPRESSION", "string", "none",
       "Job default codec of push_pull for float32 tensors that ask for none themselves "
       "(Compression.none): none, fp16, bf16, int8, onebit, topk:R or randomk:R (R: the "
       "fraction kept, in [1/65536, 1]). Workers encode each partition, servers sum in float32 and "
       "re-encode the sum (docs/compression.md). Also the codec of PS-mode gradient pushes "
       "(PsApplyXXX, tf_ps_ops.optimizers), whose parameters come back uncompressed. Read by the "
       "workers; must agree between them."},
      {"TFPS_ERROR_FEEDBACK", "int", "1",
       "1: onebit, topk and randomk keep what each push_pull did not send (per tensor and "
       "partition, on the worker; per partition on the server for the sum) and add it to the "
       "next call. 0: no memory (the plain, biased codec)."},
      {"TFPS_CONSISTENCY", "string", "bsp",
       "The job's consistency model (docs/consistency.md): bsp (a push_pull or PS update of "
       "step t is answered once every worker pushed step t), ssp:S (once the slowest worker "
       "pushed step t-S; S from 0 to 1000000, ssp:0 is bsp) or asp (at once). Read by the "
       "workers, which must agree (the rendezvous refuses a worker that differs); the servers "
       "take it from the scheduler. Also `tf_ps_ops.init(consistency=...)`."},
      {"TFPS_CONSISTENCY_TRACE", "string", "",
       "ps_server, for tests and debugging: a directory where every summation thread appends "
       "one line per answer it releases under ssp/asp (reads-S-T.txt: rank, key, partition, "
       "step, the slowest worker's clock, pushes summed). Empty: no trace."},
      {"TFPS_HIERARCHICAL", "int", "1",
       "1: workers on the same host (local_size > 1) sum dense float32/float64/int32/int64 "
       "push_pulls locally through shared memory first; only local rank 0 talks to the "
       "servers and hands the sum back (docs/hierarchical.md; measured faster in every "
       "configuration, benchmarks/RESULTS.md). Must agree on every worker. 0: every worker "
       "pushes its own gradient (the flat path)."},
      {"TFPS_SHM_SERVER", "int", "1",
       "1: a worker and the ps_server on its own host exchange dense uncompressed partitions "
       "through shared memory (a sealed memfd per partition, named in /dev/shm after a random "
       "token the server hands out) instead of loopback TCP; only the 64-byte heads cross "
       "the socket (docs/hierarchical.md). Read by workers and servers. Used only after the "
       "server's probe segment proved both share /dev/shm; a partition whose segment cannot "
       "be reserved (memory limit) or that the server refuses takes the socket. 0: loopback "
       "TCP."},
      {"TFPS_NCCL_LIBRARY", "string", "",
       "CUDA builds: the path of libnccl.so.2 that sums the GPU tensors of one host's workers "
       "in hierarchical aggregation (docs/gpu.md). Empty: the dynamic linker's search path, "
       "then the nvidia-nccl-cu12/-cu13 wheel next to tf_ps_ops. When any local worker cannot "
       "open it (or sees no GPU), GPU tensors are summed through shared memory, logged once."},
  };
  return table;
}

namespace {

std::string Lookup(const char* name) {
  const char* value = std::getenv(name);
  if (value != nullptr && value[0] != '\0') return value;
  for (const ConfigEntry& e : ConfigTable()) {
    if (std::string(e.name) == name) return e.default_value;
  }
  return "";
}

Status ParseDouble(const char* name, double min, double* out) {
  std::string text = Lookup(name);
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || *end != '\0' || !(v >= min)) {
    return InvalidArgument(std::string(name) + "='" + text + "' is not a number >= " +
                           std::to_string(min));
  }
  *out = v;
  return Status::Ok();
}

// A number >= min; one above max (also inf) is used as max, and the warning says so: a
// "wait forever" meant by a huge value stays as close to that as the machinery allows.
Status ParseClampedDouble(const char* name, double min, double max, const char* why_max,
                          double* out) {
  TFPS_RETURN_IF_ERROR(ParseDouble(name, min, out));
  if (*out > max) {
    TFPS_LOG(Warning) << name << "=" << Lookup(name) << " is above the largest " << why_max
                      << std::setprecision(12) << " (" << max << " s); using " << max << " s";
    *out = max;
  }
  return Status::Ok();
}

Status ParseInt(const char* name, int64_t min, int64_t max, int64_t* out) {
  std::string text = Lookup(name);
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0' || v < min || v > max) {
    return InvalidArgument(std::string(name) + "='" + text + "' is not an integer in [" +
                           std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  *out = v;
  return Status::Ok();
}

// The job key: 40 Z85 characters (a 32-byte CURVE secret key), surrounding white space
// ignored. The file should be readable by its owner only; a key others can read is no
// secret, so that is refused.
Status ReadAuthKey(const std::string& path, std::string* key) {
  key->clear();
  if (path.empty()) return Status::Ok();
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return InvalidArgument("TFPS_AUTH_KEY_FILE='" + path + "' cannot be read: " +
                           std::strerror(errno));
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return InvalidArgument("TFPS_AUTH_KEY_FILE='" + path + "' may be read by others than its "
                           "owner: chmod 600 it (the key is the job's only secret)");
  }
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t begin = text.find_first_not_of(" \t\r\n");
  const size_t end = text.find_last_not_of(" \t\r\n");
  text = begin == std::string::npos ? "" : text.substr(begin, end - begin + 1);
  static const char kZ85[] =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
  if (!in.good() && !in.eof()) {
    return InvalidArgument("TFPS_AUTH_KEY_FILE='" + path + "' cannot be read");
  }
  if (text.size() != 40 || text.find_first_not_of(kZ85) != std::string::npos) {
    return InvalidArgument("TFPS_AUTH_KEY_FILE='" + path + "' does not hold a CURVE secret key "
                           "(40 Z85 characters); make one with `ps_server --gen-key FILE`");
  }
  *key = text;
  return Status::Ok();
}

// A 0/1 switch.
Status ParseSwitch(const char* name, bool* out) {
  int64_t value = 0;
  TFPS_RETURN_IF_ERROR(ParseInt(name, 0, 1, &value));
  *out = value != 0;
  return Status::Ok();
}

// TFPS_IO_THREADS; 0 picks one I/O thread per four cores this process may run on, 1 to 4.
Status LoadIoThreads(Config* config) {
  int64_t threads = 0;
  TFPS_RETURN_IF_ERROR(ParseInt("TFPS_IO_THREADS", 0, kMaxIoThreads, &threads));
  if (threads == 0) {
    cpu_set_t allowed;
    const int cores = sched_getaffinity(0, sizeof(allowed), &allowed) == 0
                          ? CPU_COUNT(&allowed)
                          : static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
    threads = std::min(4, std::max(1, cores / 4));
  }
  config->io_threads = static_cast<int>(threads);
  return Status::Ok();
}

// The timeouts, the message and partition sizes, the server's threads and the scheduling
// credit.
Status LoadLimits(Config* config) {
  // Deadlines are steady_clock time points (64-bit nanoseconds: 292 years) and messages
  // print whole seconds as int: 30 days keeps far from both.
  TFPS_RETURN_IF_ERROR(ParseClampedDouble("TFPS_TIMEOUT", 0.1, kMaxTimeoutS,
                                          "supported", &config->timeout_s));
  TFPS_RETURN_IF_ERROR(ParseClampedDouble("TFPS_STALL_WARNING", 0.0, kMaxTimeoutS,
                                          "supported", &config->stall.warning_s));
  TFPS_RETURN_IF_ERROR(ParseClampedDouble("TFPS_STALL_SHUTDOWN", 0.0, kMaxTimeoutS,
                                          "supported", &config->stall.shutdown_s));
  TFPS_RETURN_IF_ERROR(ParseClampedDouble("TFPS_HEARTBEAT_TIMEOUT", 1.0, kMaxHeartbeatTimeoutS,
                                          "ZeroMQ can carry", &config->heartbeat_timeout_s));
  TFPS_RETURN_IF_ERROR(
      ParseInt("TFPS_PARTITION_BYTES", 8, int64_t{1} << 31, &config->partition_bytes));
  int64_t threads = 0;
  TFPS_RETURN_IF_ERROR(ParseInt("TFPS_SERVER_THREADS", 1, 256, &threads));
  config->server_threads = static_cast<int>(threads);
  TFPS_RETURN_IF_ERROR(LoadIoThreads(config));
  TFPS_RETURN_IF_ERROR(
      ParseInt("TFPS_SCHEDULING_CREDIT", 0, int64_t{1} << 40, &config->scheduling_credit));
  TFPS_RETURN_IF_ERROR(
      ParseInt("TFPS_FUSION_BYTES", 0, int64_t{1} << 31, &config->fusion_bytes));
  TFPS_RETURN_IF_ERROR(ParseInt("TFPS_MAX_MESSAGE_BYTES", 4096, int64_t{1} << 40,
                                &config->max_message_bytes));
  TFPS_RETURN_IF_ERROR(
      ParseInt("TFPS_PEER_QUEUE_BYTES", 65536, int64_t{1} << 50, &config->peer_queue_bytes));
  return ParseInt("TFPS_SERVER_PUSH_BYTES", 0, int64_t{1} << 50, &config->server_push_bytes);
}

// The server's push budget (0: automatic), and that one message fits in it and the
// partitions and fusion batches in one message.
Status CheckSizeLimits(Config* config) {
  const bool automatic_budget = config->server_push_bytes == 0;
  if (automatic_budget) {  // auto: a quarter of this machine's memory, >= 2 GiB
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_size = sysconf(_SC_PAGESIZE);
    const int64_t quarter = pages > 0 && page_size > 0
                                ? static_cast<int64_t>(pages) * page_size / 4
                                : int64_t{0};
    config->server_push_bytes = std::max(int64_t{1} << 31, quarter);
  }
  if (config->server_push_bytes < config->max_message_bytes) {
    // With the automatic budget the message size is what the user set out of range.
    if (automatic_budget) {
      return InvalidArgument(
          "TFPS_MAX_MESSAGE_BYTES=" + std::to_string(config->max_message_bytes) +
          " is out of range: a server holds at most TFPS_SERVER_PUSH_BYTES=" +
          std::to_string(config->server_push_bytes) + " bytes of pushes (automatic here: a "
          "quarter of this machine's memory, at least 2 GiB), so it may be 4096.." +
          std::to_string(config->server_push_bytes) + "; lower it, or set "
          "TFPS_SERVER_PUSH_BYTES to at least " + std::to_string(config->max_message_bytes));
    }
    return InvalidArgument("TFPS_SERVER_PUSH_BYTES=" +
                           std::to_string(config->server_push_bytes) +
                           " is below TFPS_MAX_MESSAGE_BYTES=" +
                           std::to_string(config->max_message_bytes) +
                           ": a server could not take even one message; set it to " +
                           std::to_string(config->max_message_bytes) + ".." +
                           std::to_string(int64_t{1} << 50) + " (0: automatic)");
  }
  if (config->partition_bytes > config->max_message_bytes ||
      config->fusion_bytes > config->max_message_bytes) {
    return InvalidArgument("TFPS_PARTITION_BYTES=" + std::to_string(config->partition_bytes) +
                           " and TFPS_FUSION_BYTES=" + std::to_string(config->fusion_bytes) +
                           " may not exceed TFPS_MAX_MESSAGE_BYTES=" +
                           std::to_string(config->max_message_bytes));
  }
  return Status::Ok();
}

// TFPS_BIND: *, an IPv4 address, an IPv6 address (kept bare) or an interface name.
Status LoadBind(Config* config) {
  config->bind = Lookup("TFPS_BIND");
  std::string bare = config->bind;  // an IPv6 literal, bare or in brackets: ::1, [::1]
  if (bare.size() >= 2 && bare.front() == '[' && bare.back() == ']') {
    bare = bare.substr(1, bare.size() - 2);
  }
  in6_addr v6;
  if (bare.find(':') != std::string::npos && inet_pton(AF_INET6, bare.c_str(), &v6) == 1) {
    config->bind = bare;
  } else if (config->bind.empty() ||
             config->bind.find_first_of(":/[] \t\n") != std::string::npos) {
    return InvalidArgument("TFPS_BIND='" + config->bind + "' is not *, an IPv4 address, an "
                           "IPv6 address (::1 or [::1]) or an interface name");
  } else if (config->bind.find_first_not_of("0123456789.") == std::string::npos) {
    // Digits and dots name no interface: an IPv4 address, or a mistyped one (256.1.1.1),
    // which would otherwise pass as a name and be taken for a non-loopback address.
    in_addr v4;
    if (inet_pton(AF_INET, config->bind.c_str(), &v4) != 1) {
      return InvalidArgument("TFPS_BIND='" + config->bind + "' is not a valid IPv4 address "
                             "(four numbers 0..255 separated by dots, e.g. 127.0.0.1)");
    }
  }
  return Status::Ok();
}

// The job key, and the switches, names and paths of the optional features.
Status LoadFeatures(Config* config) {
  TFPS_RETURN_IF_ERROR(ReadAuthKey(Lookup("TFPS_AUTH_KEY_FILE"), &config->auth_secret_key));
  TFPS_RETURN_IF_ERROR(ParseSwitch("TFPS_INSECURE", &config->insecure));
  config->timeline = Lookup("TFPS_TIMELINE");
  if (!Lookup("TFPS_METRICS_PORT").empty()) {
    int64_t port = 0;
    TFPS_RETURN_IF_ERROR(ParseInt("TFPS_METRICS_PORT", 0, 65535, &port));
    config->metrics_port = static_cast<int>(port);
  }
  // Parsed by the engine (cc/codec is above this layer); the server does not read it.
  config->compression = Lookup("TFPS_COMPRESSION");
  TFPS_RETURN_IF_ERROR(ParseSwitch("TFPS_ERROR_FEEDBACK", &config->error_feedback));
  TFPS_RETURN_IF_ERROR(
      ParseConsistency("TFPS_CONSISTENCY", Lookup("TFPS_CONSISTENCY"), &config->consistency));
  config->consistency_trace = Lookup("TFPS_CONSISTENCY_TRACE");
  TFPS_RETURN_IF_ERROR(ParseSwitch("TFPS_HIERARCHICAL", &config->hierarchical));
  TFPS_RETURN_IF_ERROR(ParseSwitch("TFPS_SHM_SERVER", &config->shm_server));
  config->nccl_library = Lookup("TFPS_NCCL_LIBRARY");
  config->checkpoint_dir = Lookup("TFPS_CHECKPOINT_DIR");
  return ParseInt("TFPS_CHECKPOINT_EVERY", 0, int64_t{1} << 50, &config->checkpoint_every);
}

// TFPS_LOG_LEVEL and TFPS_LOG_TIMESTAMP, which take effect at once.
Status LoadLogLevel(Config* config) {
  TFPS_RETURN_IF_ERROR(ParseSwitch("TFPS_LOG_TIMESTAMP", &config->log_timestamp));
  SetLogTimestamps(config->log_timestamp);
  config->log_level = Lookup("TFPS_LOG_LEVEL");
  LogLevel level;
  if (!ParseLogLevel(config->log_level, &level)) {
    return InvalidArgument("TFPS_LOG_LEVEL='" + config->log_level +
                           "' is not one of debug, info, warning, error");
  }
  SetLogLevel(level);
  return Status::Ok();
}

}  // namespace

// In this order: the first error is the one reported.
Status LoadConfig(Config* config) {
  TFPS_RETURN_IF_ERROR(LoadLimits(config));
  TFPS_RETURN_IF_ERROR(CheckSizeLimits(config));
  TFPS_RETURN_IF_ERROR(LoadBind(config));
  TFPS_RETURN_IF_ERROR(LoadFeatures(config));
  return LoadLogLevel(config);
}

}  // namespace tfps

// Reading the C++ side's environment variables (config.h): each checked against its entry
// in the table (config_table.cc), parsed and range-checked, with errors that name the
// variable.
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
      ParseInt("TFPS_SCHEDULING_CREDIT", 0, kMaxSchedulingCredit, &config->scheduling_credit));
  TFPS_RETURN_IF_ERROR(ParseInt("TFPS_FUSION_BYTES", 0, kMaxFusionBytes, &config->fusion_bytes));
  TFPS_RETURN_IF_ERROR(ParseInt("TFPS_CYCLE_US", 0, kMaxCycleUs, &config->cycle_us));
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

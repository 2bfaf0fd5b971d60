#include "tf_ps_ops/cc/common/logging.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace tfps {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<bool> g_timestamps{true};
std::mutex g_role_mu;
std::string g_role = "tfps";  // guarded by g_role_mu

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
  }
  return "?";
}

// "2026-12-01 20:15:03.123456 " in UTC.
std::string Timestamp() {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  tm utc;
  gmtime_r(&now.tv_sec, &utc);
  char text[48];
  const size_t n = std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &utc);
  std::snprintf(text + n, sizeof(text) - n, ".%06ld ", now.tv_nsec / 1000);
  return text;
}

}  // namespace

void SetLogTimestamps(bool on) { g_timestamps = on; }

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

bool ParseLogLevel(const std::string& text, LogLevel* level) {
  if (text == "debug") *level = LogLevel::kDebug;
  else if (text == "info") *level = LogLevel::kInfo;
  else if (text == "warning") *level = LogLevel::kWarning;
  else if (text == "error") *level = LogLevel::kError;
  else return false;
  return true;
}

void SetLogRole(const std::string& role) {
  std::lock_guard<std::mutex> lock(g_role_mu);
  g_role = "tfps " + role;
}

std::string EscapeForLog(const std::string& text, size_t max_bytes) {
  std::string out;
  const size_t n = std::min(text.size(), max_bytes);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    }
  }
  if (text.size() > max_bytes) out += "...";
  return out;
}

LogMessage::~LogMessage() {
  std::string role;
  {
    std::lock_guard<std::mutex> lock(g_role_mu);
    role = g_role;
  }
  // A line break inside a message (quoted peer text that escaped EscapeForLog, say) is
  // indented, so no later line of it can pass for a line of its own.
  std::string text = stream_.str();
  for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 1)) {
    text.insert(at + 1, "    ");
  }
  // One fprintf per line so lines from several threads do not interleave.
  const std::string time = g_timestamps ? Timestamp() : std::string();
  std::fprintf(stderr, "%s[%s] %s: %s\n", time.c_str(), role.c_str(), LevelName(level_),
               text.c_str());
  std::fflush(stderr);
}

}  // namespace tfps

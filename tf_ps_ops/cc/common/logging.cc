#include "tf_ps_ops/cc/common/logging.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace tfps {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
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

}  // namespace

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

LogMessage::~LogMessage() {
  std::string role;
  {
    std::lock_guard<std::mutex> lock(g_role_mu);
    role = g_role;
  }
  // One fprintf per line so lines from several threads do not interleave.
  std::fprintf(stderr, "[%s] %s: %s\n", role.c_str(), LevelName(level_), stream_.str().c_str());
  std::fflush(stderr);
}

}  // namespace tfps

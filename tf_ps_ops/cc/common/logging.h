// Minimal leveled logging to stderr, one line per message, prefixed with the role
// ("[tfps worker 1]", "[tfps server 0]") so interleaved logs of a job stay readable, and
// optionally with the time.
#ifndef TFPS_CC_COMMON_LOGGING_H_
#define TFPS_CC_COMMON_LOGGING_H_

#include <sstream>
#include <string>

namespace tfps {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Parses "debug", "info", "warning", "error"; false on anything else.
bool ParseLogLevel(const std::string& text, LogLevel* level);
void SetLogRole(const std::string& role);  // e.g. "server 0"
// true: each line starts with the UTC time to the microsecond (TFPS_LOG_TIMESTAMP).
void SetLogTimestamps(bool on);

// Text from the network (a peer's routing id, say) as it may appear inside a log line:
// printable ASCII stays, a backslash and anything else (a newline that would start a
// forged line, terminal escapes, invalid UTF-8) become \xNN or \n; at most `max_bytes`
// of the input are shown, then "...".
std::string EscapeForLog(const std::string& text, size_t max_bytes = 64);

class LogMessage {
 public:
  explicit LogMessage(LogLevel level) : level_(level) {}
  ~LogMessage();
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

// Turns the stream expression into void so both arms of ?: have one type.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace tfps

// The message is only formatted when its level is enabled; safe inside an unbraced if.
#define TFPS_LOG(level)                                                 \
  (::tfps::LogLevel::k##level < ::tfps::GetLogLevel())                  \
      ? (void)0                                                         \
      : ::tfps::LogVoidify() & ::tfps::LogMessage(::tfps::LogLevel::k##level).stream()

#endif  // TFPS_CC_COMMON_LOGGING_H_

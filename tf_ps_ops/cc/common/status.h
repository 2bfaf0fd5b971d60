// Status: how errors cross thread and library boundaries in the core.
// Exceptions never cross threads; every asynchronous result is a Status.
#ifndef TFPS_CC_COMMON_STATUS_H_
#define TFPS_CC_COMMON_STATUS_H_

#include <string>
#include <utility>

namespace tfps {

// Codes mirror the TensorFlow/absl codes they are mapped to in the kernels.
enum class Code : int {
  kOk = 0,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kAlreadyExists = 6,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kInternal = 13,
  kUnavailable = 14,
};

class Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

  // Same code, message prefixed with context ("tensor 'x': " + message).
  Status WithPrefix(const std::string& prefix) const {
    return ok() ? *this : Status(code_, prefix + message_);
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }
inline Status DeadlineExceeded(std::string m) { return Status(Code::kDeadlineExceeded, std::move(m)); }
inline Status ResourceExhausted(std::string m) { return Status(Code::kResourceExhausted, std::move(m)); }
inline Status FailedPrecondition(std::string m) { return Status(Code::kFailedPrecondition, std::move(m)); }
inline Status Unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }
inline Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }
inline Status Aborted(std::string m) { return Status(Code::kAborted, std::move(m)); }

inline std::string Status::ToString() const {
  switch (code_) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "InvalidArgument: " + message_;
    case Code::kDeadlineExceeded: return "DeadlineExceeded: " + message_;
    case Code::kAlreadyExists: return "AlreadyExists: " + message_;
    case Code::kResourceExhausted: return "ResourceExhausted: " + message_;
    case Code::kFailedPrecondition: return "FailedPrecondition: " + message_;
    case Code::kAborted: return "Aborted: " + message_;
    case Code::kInternal: return "Internal: " + message_;
    case Code::kUnavailable: return "Unavailable: " + message_;
  }
  return message_;
}

#define TFPS_RETURN_IF_ERROR(expr)        \
  do {                                    \
    ::tfps::Status _tfps_s = (expr);      \
    if (!_tfps_s.ok()) return _tfps_s;    \
  } while (0)

}  // namespace tfps

#endif  // TFPS_CC_COMMON_STATUS_H_

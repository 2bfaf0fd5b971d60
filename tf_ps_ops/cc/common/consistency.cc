#include "tf_ps_ops/cc/common/consistency.h"

namespace tfps {

Status ParseConsistency(const std::string& what, const std::string& text, Consistency* out) {
  const Status bad = InvalidArgument(
      what + "='" + text + "' is not bsp, asp or ssp:S with S a whole number from 0 to " +
      std::to_string(kMaxStaleness) + " (the staleness bound, in steps)");
  Consistency c;
  if (text == "bsp") {
    c.kind = Consistency::kBsp;
  } else if (text == "asp") {
    c.kind = Consistency::kAsp;
  } else if (text.compare(0, 4, "ssp:") == 0) {
    const std::string digits = text.substr(4);
    if (digits.empty() || digits.size() > 7) return bad;
    int64_t s = 0;
    for (char ch : digits) {
      if (ch < '0' || ch > '9') return bad;
      s = s * 10 + (ch - '0');
    }
    if (s > kMaxStaleness) return bad;
    c.kind = s == 0 ? Consistency::kBsp : Consistency::kSsp;
    c.staleness = s;
  } else {
    return bad;
  }
  *out = c;
  return Status::Ok();
}

std::string ConsistencyName(const Consistency& c) {
  switch (c.kind) {
    case Consistency::kSsp:
      return "ssp:" + std::to_string(c.staleness);
    case Consistency::kAsp:
      return "asp";
    default:
      return "bsp";
  }
}

}  // namespace tfps

// The consistency model of a job (TFPS_CONSISTENCY; docs/consistency.md): when a worker's
// read (the answer to its push) may leave the server. bsp: once every worker pushed the
// same step; ssp:S: once the slowest worker has pushed step t-S; asp: at once. Parsed here,
// agreed between the workers at the rendezvous, enforced by the servers (ps_server/clocks.h).
#ifndef TFPS_CC_COMMON_CONSISTENCY_H_
#define TFPS_CC_COMMON_CONSISTENCY_H_

#include <cstdint>
#include <string>

#include "tf_ps_ops/cc/common/status.h"

namespace tfps {

constexpr int64_t kMaxStaleness = 1000000;  // ssp:S takes 0..kMaxStaleness

struct Consistency {
  enum Kind { kBsp = 0, kSsp = 1, kAsp = 2 };
  Kind kind = kBsp;
  int64_t staleness = 0;  // ssp only; ssp:0 is parsed as bsp (the same rule)

  bool bsp() const { return kind == kBsp; }
  bool operator==(const Consistency& o) const {
    return kind == o.kind && staleness == o.staleness;
  }
  bool operator!=(const Consistency& o) const { return !(*this == o); }
};

// "bsp", "ssp:S" (S a whole number 0..kMaxStaleness) or "asp", case-sensitive, no spaces.
// `what` names the source in the error ("TFPS_CONSISTENCY").
Status ParseConsistency(const std::string& what, const std::string& text, Consistency* out);
// The text ParseConsistency reads back: "bsp", "ssp:3", "asp".
std::string ConsistencyName(const Consistency& c);

}  // namespace tfps

#endif  // TFPS_CC_COMMON_CONSISTENCY_H_

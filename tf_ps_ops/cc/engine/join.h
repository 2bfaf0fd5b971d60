// hvd.join() (c_api.h's tfps_join, the core binding's join): tells every server that this
// worker has run out of data and waits until every worker has joined (while the others are
// alive: with stall warnings, failing only after TFPS_STALL_SHUTDOWN, if set).
//
// Under hierarchical aggregation (docs/hierarchical.md, "join()") the local workers first
// learn of it through shared memory (Hierarchical::BeginJoin). A local leader whose members
// still train joins with kFlagJoinLeads: it keeps pushing their local sums, and once they
// have all joined it sends kFlagJoinRelease, so that the servers count it as joined in the
// hierarchical rounds of other hosts too.
#ifndef TFPS_CC_ENGINE_JOIN_H_
#define TFPS_CC_ENGINE_JOIN_H_

#include "tf_ps_ops/cc/common/status.h"

namespace tfps {

class Engine;

// *last: the last rank to join.
Status JoinJob(Engine& engine, int* last);

// Tests only: this process's next join() waits `seconds` after the servers' answer before
// it stops serving its members' steps (as a loaded machine may): the window in which a
// member's first call after the join reaches a local leader that still serves.
void SetJoinEndPauseForTesting(double seconds);

}  // namespace tfps

#endif  // TFPS_CC_ENGINE_JOIN_H_

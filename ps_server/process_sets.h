// Horovod process sets on the servers: a summation push with kFlagProcessSet lists the
// members of its set (Head::members), and its round completes when those have pushed.
// The servers keep no registry of sets: every push carries its set, every push of a round
// must carry the same one, and a push must come from a member of the set it names. Rounds
// of different sets never share a key: the workers put the set's id in the tensor name.
#ifndef TFPS_PS_SERVER_PROCESS_SETS_H_
#define TFPS_PS_SERVER_PROCESS_SETS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

// Whether `rank` takes part in a round of `members` (empty: every worker).
bool InProcessSet(const std::vector<int32_t>& members, int rank);

// Why a push cannot take part in any round: it names ranks that are not workers, or a set
// its sender is not in. Ok for a push without a process set. `where` goes into the message.
Status CheckProcessSetPush(const Head& head, int num_workers, const std::string& where);

// "{0, 2}" (or "all workers"), for error messages.
std::string DescribeProcessSet(const std::vector<int32_t>& members);

}  // namespace tfps

#endif  // TFPS_PS_SERVER_PROCESS_SETS_H_

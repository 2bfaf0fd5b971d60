// A reply from a summation thread for the I/O thread to send (shard_server.h).
#ifndef TFPS_PS_SERVER_OUTGOING_H_
#define TFPS_PS_SERVER_OUTGOING_H_

#include <string>

#include "ps_server/buffer.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

struct Outgoing {
  std::string identity;  // worker routing id
  std::string head;      // encoded head frame
  Buffer payload;        // shared with the other workers' replies of the same round
};

// The routing id a worker's connection carries ("w<rank>").
std::string WorkerIdentity(int rank);

// A kError reply to worker `rank` about its push `about`, carrying the status as text.
Outgoing ErrorReply(const Header& about, int rank, int server_id, const Status& status);

}  // namespace tfps

#endif  // TFPS_PS_SERVER_OUTGOING_H_

#include "ps_server/outgoing.h"

#include "tf_ps_ops/cc/common/metrics.h"

namespace tfps {

std::string WorkerIdentity(int rank) { return "w" + std::to_string(rank); }

Outgoing ErrorReply(const Header& about, int rank, int server_id, const Status& status) {
  metrics::errors.Add();
  Head head = HeadAbout(about, MsgType::kError, server_id);
  head.header.status = static_cast<uint32_t>(status.code());
  const std::string& text = status.message();
  return Outgoing{WorkerIdentity(rank), EncodeHead(head), Buffer::CopyOf(text.data(), text.size())};
}

}  // namespace tfps

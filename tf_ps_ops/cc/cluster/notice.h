// Member notices (wire kMemberNotice): how a failure found after the rendezvous reaches
// every member in seconds instead of each waiting out TFPS_TIMEOUT. A member that fails (a
// corrupt checkpoint, a cluster it cannot use) tells the scheduler why before it exits; the
// scheduler names the member and tells everyone else, and tells everyone when a member's
// connection dies without a goodbye. Status 0 is a warning (a checkpoint write that
// failed): logged by the receivers, the job goes on.
#ifndef TFPS_CC_CLUSTER_NOTICE_H_
#define TFPS_CC_CLUSTER_NOTICE_H_

#include <functional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "tf_ps_ops/cc/cluster/messages.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

constexpr size_t kMaxNoticeBytes = 4096;  // longer texts are cut (and say so)

// A member's side: sends `status` (ok: a warning carrying `warning`) to the scheduler over
// its registration socket (a DEALER). The socket's linger lets it leave before an exit.
Status SendNotice(zmq::socket_t& scheduler, const Status& status,
                  const std::string& warning = "");
// Whom a relayed notice is about, so that a server can treat a worker's end as it treats
// a closed connection. On the wire: the text's first line, "about=worker:2" (or server:0).
struct NoticeAbout {
  Role role = Role::kWorker;
  int index = -1;  // rank or server id; -1: unknown
};

// The scheduler's side: sends a notice about a member to one member (a ROUTER send).
Status RelayNotice(zmq::socket_t& router, const std::string& identity, Code code,
                   const NoticeAbout& about, const std::string& text);

// Reads a message received on a DEALER from the scheduler ([head][text]). Returns false
// when it is no notice (or malformed); else *code (kOk: a warning), *about (when the
// scheduler relayed it) and *text, escaped for the log.
bool ReadNotice(const std::vector<zmq::message_t>& frames, Code* code, NoticeAbout* about,
                std::string* text);

// A member's side: reads what the scheduler has sent on its registration socket (a DEALER),
// without waiting: answers each ping (AnswerPing; `answer_pings` false: one of the
// member's threads is stuck), logs each warning and hands each failure to `on_failure`,
// which returns whether to read on. Returns false when `on_failure` stopped it. The one
// notice loop of a worker's engine thread and a server's I/O thread. `annotate` (may be
// null) rewrites a warning before it is logged (a worker names the tensors of a server's
// stall warning, which knows only their keys).
using NoticeHandler =
    std::function<bool(Code code, const NoticeAbout& about, const std::string& text)>;
bool ReadNotices(zmq::socket_t& scheduler, bool answer_pings, const NoticeHandler& on_failure,
                 const std::function<std::string(const std::string&)>& annotate = nullptr);

// Application heartbeats (wire kPing / kPong). ZeroMQ's own heartbeats are answered by
// libzmq's I/O thread, so they miss a member whose serving thread hangs (a worker's engine
// thread, a server's I/O thread) while the process lives: the scheduler pings each member
// and the serving thread answers (ps_server/liveness.h keeps the times).
Status SendPing(zmq::socket_t& router, const std::string& identity, uint64_t sequence);
// A member's side: if `frames` (from the scheduler) are a kPing, answers it (unless
// `answer` is false: the member knows one of its threads is stuck) and returns true.
bool AnswerPing(zmq::socket_t& scheduler, const std::vector<zmq::message_t>& frames,
                bool answer = true);
// The scheduler's side: whether a message's decoded header is a kPong.
bool IsPong(const Header& header);

// What a member says when a notice ends its part in the job.
std::string JobFailedMessage(const std::string& notice);

}  // namespace tfps

#endif  // TFPS_CC_CLUSTER_NOTICE_H_

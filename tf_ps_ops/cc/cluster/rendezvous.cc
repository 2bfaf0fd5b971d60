#include "tf_ps_ops/cc/cluster/rendezvous.h"

#include <chrono>

#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/transport/zmq_util.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

namespace {

// What the reply must say for this registrant to use it (the worker indexes the hosts by
// its rank, the server takes its id).
Status CheckView(const RegisterRequest& request, const ClusterView& view) {
  if (request.role == Role::kServer) {
    return view.server_id >= 0 ? Status::Ok() : InvalidArgument("no server_id for a server");
  }
  if (static_cast<int>(view.worker_hosts.size()) != request.size ||
      view.worker_peers.size() != view.worker_hosts.size()) {
    return InvalidArgument(std::to_string(view.worker_hosts.size()) + " worker hosts and " +
                           std::to_string(view.worker_peers.size()) + " peers for a job of " +
                           std::to_string(request.size) + " workers");
  }
  return Status::Ok();
}

}  // namespace

Status RegisterWithScheduler(zmq::socket_t& socket, const std::string& scheduler,
                             const RegisterRequest& request, double timeout_s,
                             ClusterView* view) {
  Header header;
  header.type = static_cast<uint16_t>(MsgType::kRegister);
  TFPS_RETURN_IF_ERROR(SendText(socket, "", header, FormatRegister(request)));

  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  std::string progress;  // the scheduler's last "waiting for ..." note
  std::vector<zmq::message_t> frames;
  while (Clock::now() < deadline) {
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    Poll(&item, 1, 100);
    if (!RecvFrames(socket, &frames)) continue;
    Head head;
    const size_t payload = frames.size() > 1 ? frames[1].size() : 0;
    Status s = frames.empty() ? InvalidArgument("empty message")
                              : DecodeHead(frames[0].data(), frames[0].size(), payload, &head);
    if (!s.ok()) return s.WithPrefix("bad answer from the scheduler at " + scheduler + ": ");
    const std::string text = frames.size() > 1 ? frames[1].to_string() : "";
    if (head.header.type == static_cast<uint16_t>(MsgType::kError)) {
      return Status(static_cast<Code>(head.header.status),
                    "the scheduler at " + scheduler + " refused registration: " + text);
    }
    if (head.header.type != static_cast<uint16_t>(MsgType::kRegisterReply)) continue;
    bool ready = false;
    s = ParseRegisterReply(text, &ready, &progress, view);
    if (s.ok() && ready) s = CheckView(request, *view);
    if (!s.ok()) return s.WithPrefix("bad answer from the scheduler at " + scheduler + ": ");
    if (ready) return Status::Ok();
  }
  if (progress.empty()) {
    return DeadlineExceeded("no answer from the scheduler at " + scheduler + " within " +
                            std::to_string(timeout_s) +
                            " s (TFPS_TIMEOUT): is it running and reachable from this host, and "
                            "does this process have the job's TFPS_AUTH_KEY_FILE (the same key, "
                            "or none if the job has none)?");
  }
  return DeadlineExceeded("the scheduler at " + scheduler + " was still waiting for " + progress +
                          " after " + std::to_string(timeout_s) +
                          " s (TFPS_TIMEOUT): did every server and worker start?");
}

void LocalRankOf(const std::vector<std::string>& worker_hosts, int rank, int* local_rank,
                 int* local_size) {
  *local_rank = 0;
  *local_size = 0;
  for (size_t r = 0; r < worker_hosts.size(); ++r) {
    if (worker_hosts[r] != worker_hosts[rank]) continue;
    if (static_cast<int>(r) < rank) ++*local_rank;
    ++*local_size;
  }
}

}  // namespace tfps

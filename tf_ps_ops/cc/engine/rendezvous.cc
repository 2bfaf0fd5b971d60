#include "tf_ps_ops/cc/engine/rendezvous.h"

#include <chrono>

#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/transport/zmq_util.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

Status RegisterWithScheduler(zmq::socket_t& socket, const std::string& scheduler,
                             const std::map<std::string, std::string>& info, double timeout_s,
                             ClusterView* view) {
  Header header;
  header.type = static_cast<uint16_t>(MsgType::kRegister);
  TFPS_RETURN_IF_ERROR(SendText(socket, "", header, FormatKeyValues(info)));

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
    auto kv = ParseKeyValues(text);
    if (kv["status"] != "ready") {
      progress = kv["waiting"];
      continue;
    }
    view->servers = SplitList(kv["servers"], ',');
    view->worker_hosts = SplitList(kv["workers"], ',');
    view->worker_peers = SplitList(kv["peers"], ',');
    view->server_id = kv.count("server_id") ? std::stoi(kv["server_id"]) : -1;
    return Status::Ok();
  }
  if (progress.empty()) {
    return DeadlineExceeded("no answer from the scheduler at " + scheduler + " within " +
                            std::to_string(timeout_s) +
                            " s (TFPS_TIMEOUT): is it running and reachable from this host?");
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

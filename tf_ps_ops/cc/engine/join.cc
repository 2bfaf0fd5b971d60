#include "tf_ps_ops/cc/engine/join.h"

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/engine/engine.h"
#include "tf_ps_ops/cc/engine/local/hierarchical.h"

namespace tfps {

namespace {

std::atomic<int64_t> join_end_pause_us{0};  // SetJoinEndPauseForTesting

struct Sent {
  std::future<Status> status;
  std::shared_ptr<std::vector<int32_t>> output;
};

// One kJoin (with `flags`) to every server; the future is bounded by the engine's deadline.
Sent SendJoin(Engine& engine, const std::string& name, uint32_t flags) {
  const int servers = engine.num_servers();
  auto input = std::make_shared<std::vector<int32_t>>(servers, engine.rank());
  auto finished = std::make_shared<std::promise<Status>>();
  Sent sent{finished->get_future(), std::make_shared<std::vector<int32_t>>(servers, -1)};
  PushPullRequest request;
  request.name = name;
  request.join = true;
  request.flags = flags;
  request.dtype = DType::kInt32;
  request.dims = {servers};
  request.count = static_cast<uint64_t>(servers);
  request.input = input->data();
  request.output = sent.output->data();
  request.input_holder = input;
  auto output = sent.output;  // alive until done, whoever waits
  request.done = [finished, output](const Status& s) { finished->set_value(s); };
  engine.Enqueue(std::move(request));
  return sent;
}

}  // namespace

void SetJoinEndPauseForTesting(double seconds) {
  join_end_pause_us.store(static_cast<int64_t>(seconds * 1e6), std::memory_order_relaxed);
}

Status JoinJob(Engine& engine, int* last) {
  std::shared_ptr<Hierarchical> hierarchical = engine.hierarchical_aggregation();
  bool leads = false;
  if (hierarchical) TFPS_RETURN_IF_ERROR(hierarchical->BeginJoin(&leads));
  Sent join = SendJoin(engine, "tfps.join", leads ? kFlagJoinLeads : 0);
  bool released = !leads;
  while (!released && join.status.wait_for(std::chrono::milliseconds(5)) !=
                          std::future_status::ready) {
    if (!hierarchical->MembersJoined()) continue;
    // Every member has joined (and all their steps are answered): the servers may now
    // count this leader as joined in hierarchical rounds as well.
    released = true;
    Status s = SendJoin(engine, "tfps.join release", kFlagJoinRelease).status.get();
    if (!s.ok()) {
      TFPS_LOG(Warning) << "join() of worker " << engine.rank()
                        << " (local leader): the release of its leading join failed: "
                        << s.message();
    }
  }
  Status s = join.status.get();  // a dead member (or TFPS_STALL_SHUTDOWN) ends the wait
  const int64_t pause = join_end_pause_us.exchange(0, std::memory_order_relaxed);
  if (pause > 0) std::this_thread::sleep_for(std::chrono::microseconds(pause));
  if (hierarchical) hierarchical->EndJoin();
  if (s.ok()) *last = (*join.output)[0];
  return s;
}

}  // namespace tfps

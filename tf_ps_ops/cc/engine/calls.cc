// The calls in flight (loop.h): a request becomes an Op cut into partitions, queued for the
// send queue, and finishes when every partition's answer is in, or with the first error,
// a dead server or its deadline.
#include <algorithm>

#include "tf_ps_ops/cc/common/stall.h"
#include "tf_ps_ops/cc/engine/loop.h"

namespace tfps {

using Clock = std::chrono::steady_clock;

void Engine::Loop::StartOnLoop(PushPullRequest request) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  Op op;
  op.key = KeyOfName(request.name);
  op.step = ++steps_[request.name];
  const bool ps = (request.flags & (kFlagPsInit | kFlagPsApply)) != 0;
  op.row_elems = ps ? RowElements(request.dims) : 1;
  op.request = std::move(request);
  PartitionOnLoop(op);
  op.part_state.assign(op.parts.size(), kQueued);
  op.codec = codec_.Choose(op.request);
  op.remaining = static_cast<int>(op.parts.size());
  op.started = Clock::now();
  // No deadline while the servers live (a dead one fails the op at once): they warn of
  // a stall and fail it after TFPS_STALL_SHUTDOWN, naming the missing worker; this is the
  // backstop. The same offset for every op keeps ops_ in deadline order.
  op.deadline = StallDeadline(config_.stall, op.started, config_.stall.shutdown_s * 0.1 + 1.0);
  const uint64_t id = next_op_id_++;
  Op& o = ops_.emplace(id, std::move(op)).first->second;
  timeline_.Record(o.request.name, "queued", o.request.enqueued, o.started, 0);
  if ((o.request.flags & kFlagSparse) != 0) {
    Status s = PrepareSparseOnLoop(o);
    if (!s.ok()) {
      FinishOnLoop(id, s);
      return;
    }
  }
  for (const Partition& p : o.parts) {
    if (!servers_[p.server].dead.empty()) {
      FinishOnLoop(id, Unavailable(Describe(p.server) + " " + servers_[p.server].dead));
      return;
    }
  }
  if (o.request.device_codec != nullptr) {
    Status s = EncodeOnDeviceOnLoop(o);
    if (!s.ok()) {
      FinishOnLoop(id, s);
      return;
    }
  }
  for (const Partition& p : o.parts) ready_.emplace(o.request.priority, id, p.index);
}

void Engine::Loop::PartitionOnLoop(Op& op) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const PushPullRequest& request = op.request;
  const size_t elem = DTypeSize(request.dtype);
  const int num_servers = static_cast<int>(servers_.size());
  // A join is one element per server, each its own partition: PartitionTensor places
  // partition i of n on server (hash + i) % n, so every server gets one. An abort is one
  // partition whatever TFPS_PARTITION_BYTES says (the server refuses it otherwise).
  int64_t partition_bytes = config_.partition_bytes;
  if (request.join) partition_bytes = static_cast<int64_t>(elem);
  const bool abort = (request.flags & kFlagAbortRound) != 0;
  if (abort) {
    partition_bytes = std::max<int64_t>(partition_bytes,
                                        static_cast<int64_t>(request.count * elem));
  }
  op.parts = PartitionTensor(op.key, request.count, elem, partition_bytes, num_servers,
                             op.row_elems);
  if (abort) {
    // The reason goes whole to every partition the name's last push had (on different
    // servers, each with a round of its own to fail): partition 0's alone left the others'
    // rounds to time out on their servers.
    const auto last = partitions_.find(request.name);
    const uint32_t n = last == partitions_.end() ? 1 : last->second;
    op.parts.clear();
    for (uint32_t i = 0; i < n; ++i) {
      op.parts.push_back(
          Partition{i, 0, request.count, ServerOfPartition(op.key, i, num_servers)});
    }
  } else if (!request.join) {
    partitions_[request.name] = static_cast<uint32_t>(op.parts.size());
  }
}

void Engine::Loop::FinishOnLoop(uint64_t op_id, const Status& status) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  auto it = ops_.find(op_id);
  if (it == ops_.end()) return;  // finished already (a failed batch send took it)
  Op& op = it->second;
  for (const Partition& p : op.parts) {
    // Queued ones are skipped by PumpOnLoop; only unacknowledged ones hold credit.
    if (op.part_state[p.index] != kSent && op.part_state[p.index] != kAcked) continue;
    pending_.erase(PartId(op.key, op.step, p.index));
    if (op.part_state[p.index] == kSent) in_flight_bytes_ -= WireBytes(op, p.index);
  }
  auto done = std::move(op.request.done);
  const std::string name = op.request.name;
  const uint64_t step = op.step;
  uint64_t bytes = op.request.count * DTypeSize(op.request.dtype);
  if (!op.row_begin.empty()) {  // sparse: the rows pushed
    bytes = op.request.num_rows * (sizeof(int64_t) + op.row_elems * DTypeSize(op.request.dtype));
  }
  const Clock::time_point answered = Clock::now();
  if (status.ok() && timeline_.enabled()) RecordFinishedOnLoop(op, bytes, answered);
  ops_.erase(it);
  done(status.WithPrefix("push_pull of tensor '" + name + "' (call " + std::to_string(step) +
                         " on rank " + std::to_string(rank_) + "): "));
  timeline_.Record(name, "written", answered, Clock::now(), bytes);
}

void Engine::Loop::RecordFinishedOnLoop(const Op& op, uint64_t bytes,
                                        Clock::time_point answered) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const std::string& name = op.request.name;
  timeline_.Record(name, "scheduled", op.started, op.first_sent, bytes);
  if (op.answer_ready_us > 0) {  // split at the server's stamps, kept in order
    const auto pushed =
        std::clamp(timeline_.FromWallMicros(op.push_received_us), op.first_sent, answered);
    const auto ready =
        std::clamp(timeline_.FromWallMicros(op.answer_ready_us), pushed, answered);
    timeline_.Record(name, "push", op.first_sent, pushed, bytes);
    timeline_.Record(name, "server", pushed, ready, bytes);
    timeline_.Record(name, "pull", ready, answered, bytes);
  } else {
    timeline_.Record(name, "push_pull", op.first_sent, answered, bytes);
  }
}

void Engine::Loop::CheckDeadlinesOnLoop() {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const auto now = Clock::now();
  while (!ops_.empty() && ops_.begin()->second.deadline < now) {
    const Op& op = ops_.begin()->second;
    std::string missing;
    for (size_t i = 0; i < op.parts.size(); ++i) {
      if (op.part_state[i] != kDone) {
        missing += (missing.empty() ? "" : ", ") + Describe(op.parts[i].server);
        break;
      }
    }
    FinishOnLoop(ops_.begin()->first,
                 DeadlineExceeded("no answer after " +
                                  WholeSeconds(config_.stall.shutdown_s) +
                                  " s (TFPS_STALL_SHUTDOWN) from " + missing +
                                  "; another worker may be slow, stuck or dead"));
  }
}

}  // namespace tfps

// The send queue (loop.h): partitions wait in priority order for the scheduling credit
// (TFPS_SCHEDULING_CREDIT), small ones for one server leave together as a batch
// (TFPS_FUSION_BYTES), and each partition is sent as a push (or a join) with its payload:
// compressed, through a colocated server's shared memory, or the tensor's bytes in place.
#include <sys/timerfd.h>

#include <algorithm>
#include <cstring>

#include "tf_ps_ops/cc/common/metrics.h"
#include "tf_ps_ops/cc/engine/loop.h"

namespace tfps {

using Clock = std::chrono::steady_clock;

uint64_t Engine::Loop::PartBytes(const Op& op, uint32_t index) const {
  const size_t elem = DTypeSize(op.request.dtype);
  if (op.row_begin.empty()) return op.parts[index].count * elem;
  return (op.row_begin[index + 1] - op.row_begin[index]) *
         (sizeof(int64_t) + op.row_elems * elem);
}

uint64_t Engine::Loop::WireBytes(const Op& op, uint32_t index) const {
  if (op.codec.id == CodecId::kNone) return PartBytes(op, index);
  const uint64_t n = op.parts[index].count;
  return EncodedBytes(op.codec.id, n, SparseK(op.codec.ratio, n));
}

void Engine::Loop::PumpOnLoop() {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const uint64_t credit = static_cast<uint64_t>(scheduling_credit());
  while (!ready_.empty()) {
    const auto [priority, id, index] = *ready_.begin();
    auto it = ops_.find(id);
    if (it == ops_.end()) {  // the op failed meanwhile
      ready_.erase(ready_.begin());
      continue;
    }
    const uint64_t bytes = WireBytes(it->second, index);
    // Always let one partition fly, however large: credit bounds queuing, not progress.
    if (credit > 0 && in_flight_bytes_ > 0 && in_flight_bytes_ + bytes > credit) break;
    ready_.erase(ready_.begin());
    Status s = SendPartOnLoop(id, it->second, index);
    if (!s.ok()) FinishOnLoop(id, s);
  }
  FlushDueOnLoop();
}

void Engine::Loop::FlushDueOnLoop() {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const int64_t cycle_us = this->cycle_us();
  const auto cycle = std::chrono::microseconds(cycle_us);
  const Clock::time_point now = cycle_us > 0 ? Clock::now() : Clock::time_point();
  Clock::time_point first_due = Clock::time_point::max();
  for (size_t server = 0; server < batches_.size(); ++server) {
    ServerBatch& b = batches_[server];
    if (b.batch.messages.empty()) continue;
    if (cycle_us == 0 || now - b.opened >= cycle) {
      FlushOnLoop(static_cast<int>(server));
    } else {
      first_due = std::min(first_due, b.opened + cycle);
    }
  }
  // Wake the loop when the first waiting batch is due (a timerfd: poll's timeout counts
  // whole milliseconds, a cycle is often a fraction of one), unless it is set to wake it
  // sooner already.
  if (first_due >= cycle_armed_) return;
  cycle_armed_ = first_due;
  const int64_t ns = std::max<int64_t>(
      1000, std::chrono::duration_cast<std::chrono::nanoseconds>(first_due - now).count());
  itimerspec due{};
  due.it_value.tv_sec = static_cast<time_t>(ns / 1000000000);
  due.it_value.tv_nsec = static_cast<long>(ns % 1000000000);
  (void)timerfd_settime(cycle_fd_, 0, &due, nullptr);
}

void Engine::Loop::FlushOnLoop(int server) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  ServerBatch& b = batches_[server];
  if (b.batch.messages.empty()) return;
  const bool single = b.batch.messages.size() == 1;
  Status s = SendBatch(*servers_[server].socket, "", rank_, &b.batch);
  std::vector<uint64_t> ids;
  ids.swap(b.op_ids);
  if (s.ok()) {
    ++messages_sent_;
    if (!single) ++batches_sent_;
    return;
  }
  s = s.WithPrefix("sending to " + Describe(server) + ": ");
  for (uint64_t id : ids) {
    if (ops_.count(id) != 0) FinishOnLoop(id, s);
  }
}

Status Engine::Loop::SendPartOnLoop(uint64_t op_id, Op& o, uint32_t index) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const PushPullRequest& r = o.request;
  const Partition& p = o.parts[index];
  const bool no_data = r.root_rank >= 0 && r.root_rank != rank_;
  const uint64_t bytes = no_data ? 0 : PartBytes(o, index);
  const uint64_t wire = no_data ? 0 : WireBytes(o, index);
  const uint64_t fusion = static_cast<uint64_t>(fusion_bytes());
  const bool fuse = wire < fusion && !r.join;  // TFPS_FUSION_BYTES=0: never
  // Through the colocated server's shared memory (TFPS_SHM_SERVER): the head alone
  // travels, batched with the other heads and small pushes for that server.
  ShmSegment* segment = !fuse && !no_data ? ShmRouteOnLoop(o, index) : nullptr;
  const bool batched = fuse || (segment != nullptr && fusion > 0);
  if (batched && !batches_[p.server].batch.Fits(fuse ? wire : 0, fusion)) {
    FlushOnLoop(p.server);
    // A failed send fails every op in that batch, possibly this one (`o` is then gone).
    if (ops_.count(op_id) == 0) return Status::Ok();
  }
  Head head = PartHeadOnLoop(o, index, no_data);
  zmq::message_t payload;
  uint64_t wire_bytes = bytes;
  TFPS_RETURN_IF_ERROR(PartPayloadOnLoop(o, index, segment, bytes, &head, &payload, &wire_bytes));
  if (batched) {
    if (batches_[p.server].batch.messages.empty()) batches_[p.server].opened = Clock::now();
    batches_[p.server].batch.Add(Encoded{EncodeHead(head), std::move(payload)});
    batches_[p.server].op_ids.push_back(op_id);
  } else {
    Status s = SendMessage(*servers_[p.server].socket, "", head, std::move(payload));
    if (!s.ok()) return s.WithPrefix("sending to " + Describe(p.server) + ": ");
    ++messages_sent_;
  }
  if (o.first_sent == Clock::time_point()) o.first_sent = Clock::now();  // the first partition
  o.part_state[index] = kSent;
  pending_[PartId(o.key, o.step, p.index)] = op_id;
  in_flight_bytes_ += WireBytes(o, index);
  bytes_sent_ += wire_bytes;
  metrics::worker_bytes_sent_server.Add(wire_bytes);
  ++parts_sent_;
  return Status::Ok();
}

Head Engine::Loop::PartHeadOnLoop(const Op& o, uint32_t index, bool no_data) const {
  TFPS_CHECK_ON_LOOP(loop_thread_);  // the timeline's state is the engine thread's
  const PushPullRequest& r = o.request;
  const Partition& p = o.parts[index];
  Head head;
  Header& h = head.header;
  h.type = static_cast<uint16_t>(MsgType::kPushPull);
  h.key = o.key;
  h.partition = p.index;
  h.num_partitions = static_cast<uint32_t>(o.parts.size());
  h.step = o.step;
  h.dtype = static_cast<uint8_t>(r.dtype);
  h.flags = (no_data ? kFlagNoData : 0) | r.flags | (timeline_.enabled() ? kFlagTimed : 0) |
            (scheduling_credit() > 0 ? kFlagAck : 0) |
            (r.root_rank >= 0 ? kFlagBroadcast : 0) | (r.members.empty() ? 0 : kFlagProcessSet);
  head.members = r.members;
  if (r.join) {  // no acknowledgement, no timeline: a join is answered when all joined
    h.type = static_cast<uint16_t>(MsgType::kJoin);
    h.flags = r.flags & (kFlagJoinLeads | kFlagJoinRelease);
  }
  h.optimizer = static_cast<uint8_t>(r.optimizer);
  head.params = r.params;
  h.reduce_op = static_cast<uint8_t>(r.reduce_op);
  if (r.root_rank >= 0 && (r.flags & (kFlagPsInit | kFlagPsApply | kFlagSparse)) == 0) {
    head.params = {static_cast<double>(r.root_rank)};  // the server checks every worker
  }                                                     // names the same root
  h.sender = rank_;
  h.count = p.count;
  h.total_count = r.count;
  head.dims = r.dims;
  if (!o.row_begin.empty()) h.count = o.row_begin[index + 1] - o.row_begin[index];  // sparse
  return head;
}

Status Engine::Loop::PartPayloadOnLoop(Op& o, uint32_t index, ShmSegment* segment,
                                       uint64_t bytes, Head* head, zmq::message_t* payload,
                                       uint64_t* wire_bytes) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const PushPullRequest& r = o.request;
  const Partition& p = o.parts[index];
  Header& h = head->header;
  if (!o.device_encoded.empty()) {  // encoded on the GPU (EncodeOnDeviceOnLoop)
    const HostBytes& encoded = o.device_encoded[index];
    h.codec = static_cast<uint8_t>(o.codec.id);
    if (!codec_.FeedbackFor(r)) h.flags |= kFlagNoFeedback;
    *wire_bytes = encoded.size;
    *payload = ZeroCopyMessage(encoded.data, encoded.size, encoded.holder);
  } else if (o.codec.id != CodecId::kNone) {
    std::shared_ptr<EncodedPart> encoded;
    TFPS_RETURN_IF_ERROR(codec_.EncodePart(r, o.codec, o.key, p.index, o.step,
                                           static_cast<const float*>(r.input) + p.offset,
                                           p.count, &encoded));
    h.codec = static_cast<uint8_t>(o.codec.id);
    if (!codec_.FeedbackFor(r)) h.flags |= kFlagNoFeedback;
    *wire_bytes = encoded->size();
    *payload = ZeroCopyMessage(encoded->data(), encoded->size(), encoded);
  } else if (segment != nullptr) {
    const size_t elem = DTypeSize(r.dtype);
    std::memcpy(segment->data(), static_cast<const char*>(r.input) + p.offset * elem, bytes);
    h.type = static_cast<uint16_t>(MsgType::kPushPullShm);  // the head alone travels
    servers_[p.server].shm_busy[{o.key, index}] = o.step;
    ++shm_parts_sent_;
  } else if (!o.row_begin.empty()) {
    *payload = SparsePayload(o, index);
  } else {
    const size_t elem = DTypeSize(r.dtype);
    *payload = ZeroCopyMessage(static_cast<const char*>(r.input) + p.offset * elem, bytes,
                               r.input_holder);
  }
  return Status::Ok();
}

}  // namespace tfps

// The servers' replies to the calls in flight (loop.h): a batch is split into its replies;
// an acknowledgement returns credit; an error fails the call (or, for a push the server
// could not read from shared memory, resends it over the socket); a data reply is checked,
// decoded and written into the output.
#include <algorithm>
#include <cstring>

#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/common/metrics.h"
#include "tf_ps_ops/cc/engine/loop.h"

namespace tfps {

void Engine::Loop::OnMessageOnLoop(int server, std::vector<zmq::message_t>& frames) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  if (!IsBatchHead(frames[0].data(), frames[0].size())) {
    if (frames.size() > 2) {
      TFPS_LOG(Warning) << "dropped a reply of " << frames.size() << " frames from "
                        << Describe(server);
      return;
    }
    OnReplyOnLoop(server, frames[0], frames.size() > 1 ? &frames[1] : nullptr);
    return;
  }
  Head batch;
  Status s = DecodeHead(frames[0].data(), frames[0].size(), 0, &batch);
  if (s.ok()) s = CheckBatch(batch.header, frames.size() - 1);
  if (!s.ok()) {
    TFPS_LOG(Warning) << "dropped a malformed batch from " << Describe(server) << ": "
                      << s.message();
    return;
  }
  ++batches_received_;
  for (size_t i = 1; i + 1 < frames.size(); i += 2) OnReplyOnLoop(server, frames[i], &frames[i + 1]);
}

void Engine::Loop::OnReplyOnLoop(int server, zmq::message_t& head_frame,
                                 zmq::message_t* payload_frame) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  Head head;
  const size_t payload = payload_frame != nullptr ? payload_frame->size() : 0;
  Status s = DecodeHead(head_frame.data(), head_frame.size(), payload, &head);
  if (s.ok() && head.header.type == static_cast<uint16_t>(MsgType::kBatch)) {
    s = InvalidArgument("a batch inside a batch");
  }
  if (!s.ok()) {
    TFPS_LOG(Warning) << "dropped a malformed reply from " << Describe(server) << ": "
                      << s.message();
    return;
  }
  const Header& h = head.header;
  const bool pushed_in_shm = ReleaseShmOnLoop(server, h);  // this answers a push in shm
  auto it = pending_.find(PartId(h.key, h.step, h.partition));
  if (it == pending_.end()) {
    if (h.type == static_cast<uint16_t>(MsgType::kError)) {
      TFPS_LOG(Error) << Describe(server) << " reported: "
                      << (payload_frame != nullptr ? payload_frame->to_string() : "");
    } else {
      TFPS_LOG(Debug) << "late reply from " << Describe(server) << " for a finished push_pull";
    }
    return;
  }
  const uint64_t id = it->second;
  Op& op = ops_.at(id);
  if (op.part_state[h.partition] == kSent) in_flight_bytes_ -= WireBytes(op, h.partition);
  if (h.type == static_cast<uint16_t>(MsgType::kAck)) {  // credit back; the answer is due
    if (op.part_state[h.partition] == kSent) op.part_state[h.partition] = kAcked;
    return;
  }
  pending_.erase(it);
  op.part_state[h.partition] = kDone;
  OnAnswerOnLoop(server, id, op, head, payload_frame, pushed_in_shm);
}

void Engine::Loop::OnAnswerOnLoop(int server, uint64_t op_id, Op& op, const Head& head,
                                  zmq::message_t* payload_frame, bool pushed_in_shm) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const Header& h = head.header;
  if (h.type == static_cast<uint16_t>(MsgType::kError)) {
    OnErrorReplyOnLoop(server, op_id, op, h, payload_frame, pushed_in_shm);
    return;
  }
  if ((h.flags & kFlagTimed) != 0) {
    op.push_received_us = std::max(op.push_received_us, head.params[0]);
    op.answer_ready_us = std::max(op.answer_ready_us, head.params[1]);
  }
  Status s;
  if (op.row_begin.empty()) {
    s = OnDataReplyOnLoop(server, op, h, payload_frame);
  } else {
    s = payload_frame == nullptr ? Internal("a sparse reply without payload frame")
                                 : OnSparseReplyOnLoop(op, h, *payload_frame);
    s = s.WithPrefix(Describe(server) + ": ");
  }
  if (!s.ok()) {
    FinishOnLoop(op_id, s);
    return;
  }
  bytes_received_ += payload_frame != nullptr ? payload_frame->size() : 0;
  metrics::worker_bytes_received_server.Add(payload_frame != nullptr ? payload_frame->size() : 0);
  if (--op.remaining == 0) FinishOnLoop(op_id, Status::Ok());
}

void Engine::Loop::OnErrorReplyOnLoop(int server, uint64_t op_id, Op& op, const Header& h,
                                      const zmq::message_t* payload_frame, bool pushed_in_shm) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const std::string text = payload_frame != nullptr ? payload_frame->to_string() : "";
  if ((h.flags & kFlagShmRefused) != 0 && pushed_in_shm && h.partition < op.parts.size() &&
      op.row_begin.empty() &&
      servers_[server].shm_refused.count({h.key, h.partition}) == 0) {  // once, not a loop
    ResendOverSocketOnLoop(server, op_id, op, h.partition, text);
    return;
  }
  FinishOnLoop(op_id, Status(static_cast<Code>(h.status), text));
}

Status Engine::Loop::OnDataReplyOnLoop(int server, Op& op, const Header& h,
                                       zmq::message_t* payload_frame) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const Partition& p = op.parts[h.partition];
  const size_t elem = DTypeSize(op.request.dtype);
  const bool in_shm = h.type == static_cast<uint16_t>(MsgType::kPushPullReplyShm);
  const ShmSegment* shm = nullptr;
  if (in_shm) {
    auto found = servers_[server].shm.find({h.key, h.partition});
    if (found != servers_[server].shm.end()) shm = found->second.get();
  }
  auto answered = [&] {
    return Describe(server) + " answered partition " + std::to_string(h.partition);
  };
  if ((h.type != static_cast<uint16_t>(MsgType::kPushPullReply) && shm == nullptr) ||
      h.count != p.count ||
      h.dtype != static_cast<uint8_t>(op.request.dtype) ||
      h.codec != static_cast<uint8_t>(PushCodec::ReplyCodec(op.request, op.codec))) {
    return Internal(answered() + " with the wrong type or size");
  }
  char* out = static_cast<char*>(op.request.output) + p.offset * elem;
  if (op.request.device_codec != nullptr && h.codec == 0) {  // output is device memory
    return Internal(answered() + " of a GPU-encoded call uncompressed");
  }
  Status s;
  if (h.codec != 0 && op.request.device_codec != nullptr) {
    uint64_t k = 0;
    s = CheckEncoded(static_cast<CodecId>(h.codec), h.count, payload_frame->size(), &k);
    if (s.ok()) {
      s = op.request.device_codec->TakeReply(static_cast<CodecId>(h.codec), p, k,
                                             RandomKSeed(h.key, h.partition, h.step),
                                             payload_frame->data(), payload_frame->size());
    }
  } else if (h.codec != 0) {
    s = codec_.DecodeReply(h, payload_frame->data(), payload_frame->size(),
                           reinterpret_cast<float*>(out));
  } else if (p.count > 0) {
    std::memcpy(out, in_shm ? shm->data() : payload_frame->data(), p.count * elem);
  }
  return s.WithPrefix(Describe(server) + ": ");
}

}  // namespace tfps

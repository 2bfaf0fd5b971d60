#include "ps_server/key_store.h"

#include <utility>

#include "tf_ps_ops/cc/common/metrics.h"

namespace tfps {

KeyStore::KeyStore(int num_workers, int server_id, const StallPolicy& stall, Consistency consistency,
                   const std::string& trace_path)
    : num_workers_(num_workers),
      server_id_(server_id),
      stall_(stall),
      rounds_(num_workers, server_id, stall),
      params_(num_workers, server_id) {
  if (!consistency.bsp()) {
    stale_ = std::make_unique<StaleRounds>(num_workers, server_id, consistency, &params_,
                                           trace_path);
  }
}

void KeyStore::OnPush(const Head& head, Buffer payload, std::vector<Outgoing>* out,
                      double received_us) {
  if (stale_) {
    constexpr uint32_t kStaysBsp =
        kFlagBroadcast | kFlagNoData | kFlagPsInit | kFlagProcessSet | kFlagAbortRound;
    // Min/max/product rounds stay BSP too: the stale path only sums.
    if ((head.header.flags & kStaysBsp) == 0 && head.header.reduce_op == 0) {
      stale_->Add(head, std::move(payload), out);
      return;
    }
    stale_->Observe(head.header);
  }
  Round complete;
  if (rounds_.Add(head, std::move(payload), received_us, out, &complete)) {
    metrics::server_rounds.Add();
    Answer(complete, out);
  }
}

Status KeyStore::Result(Round& round, Buffer* reply, uint64_t* count) {
  const uint32_t flags = round.first.flags;
  *count = round.first.count;
  if ((flags & kFlagSparse) != 0) return params_.ApplySparse(round, reply, count);
  if (!round.has_data) {  // nobody contributed (cannot happen for a valid broadcast)
    round.sum = Buffer::Zeros(round.first.count * DTypeSize(static_cast<DType>(round.first.dtype)));
  }
  if ((flags & kFlagPsInit) != 0) return params_.Init(round, reply);
  if ((flags & kFlagPsApply) != 0) return params_.Apply(round, reply);
  *reply = round.sum;
  if (round.first.codec != 0) return Compress(round, reply);
  return Status::Ok();
}

Status KeyStore::Compress(const Round& round, Buffer* reply) {
  const auto id = static_cast<CodecId>(round.first.codec);
  const uint64_t n = round.first.count;
  const auto& [key, partition, step] = round.id;
  const uint64_t seed = RandomKSeed(key, partition, step);
  const float* sum = reinterpret_cast<const float*>(reply->data());
  Buffer encoded = Buffer::Allocate(EncodedBytes(id, n, round.codec_k));
  uint8_t* out = reinterpret_cast<uint8_t*>(encoded.data());
  // The workers' own choice: without their memory, a memory here alone would be half a rule.
  const uint64_t k = round.codec_k;
  TFPS_RETURN_IF_ERROR((round.first.flags & kFlagNoFeedback) != 0
                           ? Encode(id, sum, n, k, seed, out)
                           : feedback_.Encode(key, partition, id, sum, n, k, seed, out));
  *reply = std::move(encoded);
  return Status::Ok();
}

Head KeyStore::ReplyHead(const Round& round, uint64_t count) const {
  const bool sparse = (round.first.flags & kFlagSparse) != 0;
  Head head;
  head.header = round.first;
  head.header.type = static_cast<uint16_t>(MsgType::kPushPullReply);
  head.header.flags = sparse ? kFlagSparse : 0;
  // A sum's reply is encoded with the push's codec; a parameter travels as float32.
  if ((round.first.flags & (kFlagPsInit | kFlagPsApply)) != 0) head.header.codec = 0;
  head.header.count = count;
  head.header.optimizer = 0;
  head.header.sender = server_id_;
  if (sparse) head.dims = round.dims;  // the worker checks the rows against the shape
  return head;
}

void KeyStore::Answer(Round& round, std::vector<Outgoing>* out) {
  Buffer reply;
  uint64_t count = 0;
  Status s = Result(round, &reply, &count);
  if (!s.ok()) {
    rounds_.Fail(round, s, out);
    return;
  }
  const Head head = ReplyHead(round, count);
  const std::string encoded = EncodeHead(head);
  const double ready_us = round.received_us.empty() ? 0 : WallMicros();
  for (int rank = 0; rank < num_workers_; ++rank) {
    if (round.answered[rank]) continue;  // its local leader hands it the sum (hierarchical)
    const bool timed = !round.received_us.empty() && round.received_us[rank] > 0;
    if (!round.step_behind.empty() && round.step_behind[rank] != 0) {  // counted while joined
      Head own = head;
      own.header.step -= round.step_behind[rank];
      if (timed) {
        own.header.flags |= kFlagTimed;
        own.params = {round.received_us[rank], ready_us};
      }
      out->push_back(Outgoing{WorkerIdentity(rank), EncodeHead(own), reply});
      continue;
    }
    if (!timed) {
      out->push_back(Outgoing{WorkerIdentity(rank), encoded, reply});  // shared, not copied
      continue;
    }
    Head stamped = head;  // this worker keeps a timeline: its own stamps
    stamped.header.flags |= kFlagTimed;
    stamped.params = {round.received_us[rank], ready_us};
    out->push_back(Outgoing{WorkerIdentity(rank), EncodeHead(stamped), reply});
  }
}

}  // namespace tfps

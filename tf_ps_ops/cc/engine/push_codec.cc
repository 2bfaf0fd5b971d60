#include "tf_ps_ops/cc/engine/push_codec.h"

#include <chrono>

#include "tf_ps_ops/cc/engine/engine.h"

namespace tfps {

namespace {

using Clock = std::chrono::steady_clock;

uint64_t MicrosSince(Clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
}

}  // namespace

Status PushCodec::Init(const Config& config) {
  feedback_default_ = config.error_feedback;
  if (config.compression.empty()) return Status::Ok();
  return ParseCodec(config.compression, &default_).WithPrefix("TFPS_COMPRESSION: ");
}

CodecSpec PushCodec::Choose(const PushPullRequest& r) const {
  const bool plain_sum = r.root_rank < 0 && r.reduce_op == ReduceOp::kSum &&
                         (r.flags & (kFlagPsInit | kFlagPsApply | kFlagSparse)) == 0;
  if (!plain_sum || r.dtype != DType::kFloat32) return CodecSpec{};
  return r.codec.has_value() ? *r.codec : default_;
}

bool PushCodec::FeedbackFor(const PushPullRequest& r) const {
  return r.error_feedback < 0 ? feedback_default_ : r.error_feedback != 0;
}

Status PushCodec::EncodePart(const PushPullRequest& r, const CodecSpec& spec, uint64_t key,
                             uint32_t partition, uint64_t step, const float* in,
                             uint64_t count, std::shared_ptr<std::vector<uint8_t>>* out) {
  const Clock::time_point start = Clock::now();
  if (count > kMaxEncodedElements) {
    return InvalidArgument("compressing '" + r.name + "': a partition of " +
                           std::to_string(count) + " elements is more than a compressed "
                           "message may carry (" + std::to_string(kMaxEncodedElements) +
                           "); lower TFPS_PARTITION_BYTES");
  }
  const uint64_t k = SparseK(spec.ratio, count);
  auto bytes = std::make_shared<std::vector<uint8_t>>(EncodedBytes(spec.id, count, k));
  const uint64_t seed = RandomKSeed(key, partition, step);
  Status s = FeedbackFor(r)
                 ? feedback_.Encode(key, partition, spec.id, in, count, k, seed, bytes->data())
                 : Encode(spec.id, in, count, k, seed, bytes->data());
  if (!s.ok()) return s.WithPrefix("compressing '" + r.name + "': ");
  raw_bytes_ += 4 * count;
  encoded_bytes_ += bytes->size();
  micros_ += MicrosSince(start);
  *out = std::move(bytes);
  return Status::Ok();
}

Status PushCodec::DecodeReply(const Header& h, const void* payload, size_t size, float* out) {
  const Clock::time_point start = Clock::now();
  const auto id = static_cast<CodecId>(h.codec);
  uint64_t k = 0;
  TFPS_RETURN_IF_ERROR(CheckEncoded(id, h.count, size, &k));
  TFPS_RETURN_IF_ERROR(Decode(id, static_cast<const uint8_t*>(payload), h.count, k,
                              RandomKSeed(h.key, h.partition, h.step), out));
  micros_ += MicrosSince(start);
  return Status::Ok();
}

}  // namespace tfps

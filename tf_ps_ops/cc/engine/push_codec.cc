#include "tf_ps_ops/cc/engine/push_codec.h"

#include <time.h>

#include "tf_ps_ops/cc/engine/engine.h"

namespace tfps {

namespace {

// CPU time of the calling thread, in microseconds: codec_micros counts the engine thread's
// work, not the time it waited for a core (on a loaded machine that is several times more).
uint64_t ThreadCpuMicros() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000u + static_cast<uint64_t>(t.tv_nsec) / 1000u;
}

}  // namespace

Status PushCodec::Init(const Config& config) {
  feedback_default_ = config.error_feedback;
  if (config.compression.empty()) return Status::Ok();
  return ParseCodec(config.compression, &default_).WithPrefix("TFPS_COMPRESSION: ");
}

CodecSpec PushCodec::Choose(const PushPullRequest& r) const {
  // A summation push or a dense PS-mode gradient (kFlagPsApply); never an init (the
  // parameter itself), a broadcast or sparse rows.
  const bool dense_gradient = r.root_rank < 0 && r.reduce_op == ReduceOp::kSum &&
                              (r.flags & (kFlagPsInit | kFlagSparse)) == 0;
  if (!dense_gradient || r.dtype != DType::kFloat32) return CodecSpec{};
  return r.codec.has_value() ? *r.codec : default_;
}

CodecId PushCodec::ReplyCodec(const PushPullRequest& r, const CodecSpec& spec) {
  return (r.flags & kFlagPsApply) != 0 ? CodecId::kNone : spec.id;
}

bool PushCodec::FeedbackFor(const PushPullRequest& r) const {
  return r.error_feedback < 0 ? feedback_default_ : r.error_feedback != 0;
}

Status PushCodec::EncodePart(const PushPullRequest& r, const CodecSpec& spec, uint64_t key,
                             uint32_t partition, uint64_t step, const float* in,
                             uint64_t count, std::shared_ptr<EncodedPart>* out) {
  const uint64_t start = ThreadCpuMicros();
  if (count > kMaxEncodedElements) {
    return InvalidArgument("compressing '" + r.name + "': a partition of " +
                           std::to_string(count) + " elements is more than a compressed "
                           "message may carry (" + std::to_string(kMaxEncodedElements) +
                           "); lower TFPS_PARTITION_BYTES");
  }
  const uint64_t k = SparseK(spec.ratio, count);
  auto bytes = std::make_shared<EncodedPart>(EncodedBytes(spec.id, count, k));
  const uint64_t seed = RandomKSeed(key, partition, step);
  Status s = FeedbackFor(r)
                 ? feedback_.Encode(key, partition, spec.id, in, count, k, seed, bytes->data())
                 : Encode(spec.id, in, count, k, seed, bytes->data());
  if (!s.ok()) return s.WithPrefix("compressing '" + r.name + "': ");
  raw_bytes_ += 4 * count;
  encoded_bytes_ += bytes->size();
  micros_ += ThreadCpuMicros() - start;
  *out = std::move(bytes);
  return Status::Ok();
}

Status PushCodec::DecodeReply(const Header& h, const void* payload, size_t size, float* out) {
  const uint64_t start = ThreadCpuMicros();
  const auto id = static_cast<CodecId>(h.codec);
  uint64_t k = 0;
  TFPS_RETURN_IF_ERROR(CheckEncoded(id, h.count, size, &k));
  TFPS_RETURN_IF_ERROR(Decode(id, static_cast<const uint8_t*>(payload), h.count, k,
                              RandomKSeed(h.key, h.partition, h.step), out));
  micros_ += ThreadCpuMicros() - start;
  return Status::Ok();
}

}  // namespace tfps

// The worker's half of compression (docs/compression.md): which codec a push_pull uses,
// each partition's encoded payload (with error feedback), and the server's encoded answer
// decoded into the output. State of the engine thread (the feedback memory): no locks.
#ifndef TFPS_CC_ENGINE_PUSH_CODEC_H_
#define TFPS_CC_ENGINE_PUSH_CODEC_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "tf_ps_ops/cc/codec/codec.h"
#include "tf_ps_ops/cc/codec/error_feedback.h"
#include "tf_ps_ops/cc/common/config.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

struct PushPullRequest;

// One partition's encoded bytes, sent zero-copy. Left uninitialised: every encoder writes
// all of them, and zeroing first (as a vector would) costs one more pass, a whole one for
// int8's byte per element.
class EncodedPart {
 public:
  explicit EncodedPart(size_t size) : bytes_(new uint8_t[size > 0 ? size : 1]), size_(size) {}
  uint8_t* data() { return bytes_.get(); }
  size_t size() const { return size_; }

 private:
  std::unique_ptr<uint8_t[]> bytes_;
  size_t size_;
};

class PushCodec {
 public:
  // Reads the job default (TFPS_COMPRESSION; a bad name fails init) and TFPS_ERROR_FEEDBACK.
  Status Init(const Config& config);

  // The codec `r` travels with: its own, else the job default; kNone where compression does
  // not apply (not float32, a broadcast, a PS init, sparse rows): those travel as they are.
  CodecSpec Choose(const PushPullRequest& r) const;

  // The codec of the server's answer to `r` pushed with `spec`: the same for a sum; none
  // for a PS-mode gradient, answered with the parameter's float32 value.
  static CodecId ReplyCodec(const PushPullRequest& r, const CodecSpec& spec);

  // Whether `r` keeps error feedback (its own choice, else TFPS_ERROR_FEEDBACK).
  bool FeedbackFor(const PushPullRequest& r) const;

  // Encodes in[0, count), partition `partition` of the tensor `key` at call `step`.
  Status EncodePart(const PushPullRequest& r, const CodecSpec& spec, uint64_t key,
                    uint32_t partition, uint64_t step, const float* in, uint64_t count,
                    std::shared_ptr<EncodedPart>* out);

  // Decodes an encoded reply (its header already validated by DecodeHead) into
  // out[0, h.count).
  Status DecodeReply(const Header& h, const void* payload, size_t size, float* out);

  // Adds to the counters what was encoded elsewhere (on the GPU: device_codec.h).
  void Count(uint64_t raw, uint64_t encoded) {
    raw_bytes_ += raw;
    encoded_bytes_ += encoded;
  }

  // Counters for EngineStats (read from any thread).
  uint64_t raw_bytes() const { return raw_bytes_.load(); }
  uint64_t encoded_bytes() const { return encoded_bytes_.load(); }
  uint64_t micros() const { return micros_.load(); }

 private:
  CodecSpec default_;
  bool feedback_default_ = true;
  ErrorFeedback feedback_;
  std::atomic<uint64_t> raw_bytes_{0}, encoded_bytes_{0}, micros_{0};
};

}  // namespace tfps

#endif  // TFPS_CC_ENGINE_PUSH_CODEC_H_

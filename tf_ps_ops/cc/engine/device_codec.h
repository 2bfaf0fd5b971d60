// Compression of a GPU tensor on its own device (issue 16; docs/gpu.md, "Compression on the
// GPU"). A GPU push_pull that the engine will compress (Engine::EncodesOnDevice) hands the
// engine a DeviceCodec with the request instead of staging the whole float32 tensor: the
// engine still cuts the partitions, numbers the step and picks the codec, and calls the
// hook on its own thread where it would have called the CPU codec, so seeds, per-partition
// error feedback and the bytes on the wire are the CPU path's. The engine sees host bytes
// only and never touches the request's input or output (they are device memory). The
// implementation lives with the CUDA kernels (kernels/gpu_push_codec.*); the engine has no
// CUDA code.
#ifndef TFPS_CC_ENGINE_DEVICE_CODEC_H_
#define TFPS_CC_ENGINE_DEVICE_CODEC_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "tf_ps_ops/cc/codec/codec.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/engine/partition.h"

namespace tfps {

// Encoded bytes in host memory, kept alive by `holder` until ZeroMQ has sent them.
struct HostBytes {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  std::shared_ptr<void> holder;
};

class DeviceCodec {
 public:
  virtual ~DeviceCodec() = default;

  // On the engine thread, once per call, before its first partition leaves: encodes every
  // partition p (elements [p.offset, p.offset + p.count) of the tensor) with `spec` and
  // k = SparseK(spec.ratio, p.count), seed RandomKSeed(key, p.index, step), with the error
  // feedback of (key, p.index) when `feedback`; out[p.index] gets EncodedBytes(...) bytes.
  virtual Status EncodeParts(const CodecSpec& spec, bool feedback, uint64_t key,
                             uint64_t step, const std::vector<Partition>& parts,
                             std::vector<HostBytes>* out) = 0;

  // On the engine thread, per reply: `payload` (size bytes, already passed CheckEncoded,
  // which gave k) is the server's encoded sum of partition `part`, to be decoded into the
  // output (seed RandomKSeed(key, part.index, step)). The bytes are only valid during the
  // call. Decoding may wait for the request's done(OK).
  virtual Status TakeReply(CodecId id, const Partition& part, uint64_t k, uint64_t seed,
                           const void* payload, uint64_t size) = 0;
};

}  // namespace tfps

#endif  // TFPS_CC_ENGINE_DEVICE_CODEC_H_

// Compression of a GPU push_pull on the GPU (issue 16; docs/gpu.md, "Compression on the
// GPU"): the engine's DeviceCodec hook (engine/device_codec.h) for a float32 tensor in GPU
// memory. The engine calls it on its thread where it would call the CPU codec:
//  - EncodeParts: on this device's own CUDA stream (after the input's producers: the ready
//    event), each partition is encoded by the GPU codecs (codec/codec_gpu.h), with error
//    feedback whose residual stays on the GPU per (key, partition); only the encoded bytes
//    cross PCIe, in one copy into pinned memory, which ZeroMQ then sends as it is;
//  - TakeReply: keeps the server's encoded answer (host bytes) for its partition;
//  - DecodeInto, from the request's done callback: one copy of all encoded answers to the
//    GPU, decoded there into the output.
// Each call waits for its own stream only (never TF's compute stream), for the encode or
// decode of compressed bytes. The GPU codecs give the CPU codecs' bytes (codec_gpu.h), so a
// GPU worker and a CPU worker push the same bytes for the same gradient, and the servers
// need no change.
//
// CUDA builds only (TFPS_WITH_CUDA): the code is empty otherwise.
#ifndef TFPS_KERNELS_GPU_PUSH_CODEC_H_
#define TFPS_KERNELS_GPU_PUSH_CODEC_H_

#ifndef TFPS_WITH_CUDA
#define TFPS_WITH_CUDA 0
#endif

#if TFPS_WITH_CUDA

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tf_ps_ops/cc/engine/device_codec.h"

namespace tfps {

class GpuPushCodec : public DeviceCodec {
 public:
  // `input` and `output`: `count` float32s on CUDA device `device` (they may be the same
  // memory); `ready`: a cudaEvent_t after which `input` holds the gradient (owned by the
  // caller, alive until done). `name` names the tensor in errors.
  GpuPushCodec(std::string name, int device, const float* input, float* output,
               uint64_t count, void* ready);

  Status EncodeParts(const CodecSpec& spec, bool feedback, uint64_t key, uint64_t step,
                     const std::vector<Partition>& parts, std::vector<HostBytes>* out) override;
  Status TakeReply(CodecId id, const Partition& part, uint64_t k, uint64_t seed,
                   const void* payload, uint64_t size) override;

  // Decodes every reply into the output and waits for it. Call once, after the engine's
  // done(OK); fails if a partition has no reply.
  Status DecodeInto();

 private:
  struct Reply {
    CodecId id = CodecId::kNone;
    uint64_t offset = 0, count = 0, k = 0, seed = 0;
    std::vector<uint8_t> bytes;
    bool taken = false;
  };
  std::string name_;
  int device_;
  const float* input_;
  float* output_;
  uint64_t count_;
  void* ready_;
  std::vector<Reply> replies_;  // per partition index
};

// Device memory this process keeps for GPU compression: residuals per (device, key,
// partition) and scratch buffers. For tests and the docs' numbers.
uint64_t GpuCodecResidentBytes();

}  // namespace tfps

#endif  // TFPS_WITH_CUDA
#endif  // TFPS_KERNELS_GPU_PUSH_CODEC_H_

// How the GPU kernels move tensors between the GPU and the engine (docs/gpu.md). The engine
// sees host buffers only; the GPU kernels stage through pinned host memory with TensorFlow's
// own device context, as TF 2.21 exposes it to custom ops:
//  - StageToHost: `DeviceContext::CopyDeviceTensorToCPU` into a tensor of TF's pinned host
//    allocator (allocate_temp with on_host + gpu_compatible). TF queues the copy on its
//    device-to-host stream behind an event of the compute stream, so the copy starts as
//    soon as the kernels that produce the gradient are done, the compute stream never
//    waits, and the callback runs on TF's event thread when the bytes are on the host;
//  - CopyToDevice: `CopyCPUTensorToDevice` on the host-to-device stream, the same way back.
// The op's own thread returns right after queueing (AsyncOpKernel): backward goes on.
//
// CUDA builds only: the code is under TFPS_WITH_CUDA, which tools/native_cuda.py defines.
#ifndef TFPS_KERNELS_GPU_STAGING_H_
#define TFPS_KERNELS_GPU_STAGING_H_

#ifndef TFPS_WITH_CUDA
#define TFPS_WITH_CUDA 0
#endif

#if TFPS_WITH_CUDA

#include <functional>
#include <memory>
#include <string>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tfps {

using StagedCallback = std::function<void(const absl::Status&)>;

// A host tensor of `dtype`/`shape` in TF's pinned (page-locked, GPU-visible) memory.
absl::Status AllocatePinned(tensorflow::OpKernelContext* ctx, tensorflow::DataType dtype,
                            const tensorflow::TensorShape& shape, tensorflow::Tensor* host);

// Copies `device` into a new pinned tensor `*host` (allocated here) and calls `then` when
// it is there. `host` must stay alive until then (the callers hold it in a shared_ptr).
void StageToHost(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& device,
                 tensorflow::Tensor* host, StagedCallback then);

// The same, waiting for the copy (for one element read once: a slot's initial value).
absl::Status StageToHostSync(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& device,
                             tensorflow::Tensor* host);

// Copies pinned `host` into `device` (same size) and calls `then` when it is there.
void CopyToDevice(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& host,
                  tensorflow::Tensor* device, StagedCallback then);

// The op's CUDA stream (TF's compute stream, a cudaStream_t), for our own CUDA kernels: work
// queued there is ordered with the op's inputs and outputs as TF's own GPU kernels are.
absl::Status ComputeStream(tensorflow::OpKernelContext* ctx, void** stream);

// Runs `fn` (on TF's event thread) once the work queued so far on the op's compute stream
// has finished: the input's producers included. An error when the device cannot say.
absl::Status WhenStreamDone(tensorflow::OpKernelContext* ctx, std::function<void()> fn);

}  // namespace tfps

#endif  // TFPS_WITH_CUDA
#endif  // TFPS_KERNELS_GPU_STAGING_H_

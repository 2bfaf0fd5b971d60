// The device-specific part of a kernel registered for DEVICE_CPU and DEVICE_GPU: how its
// tensors reach host memory, where the engine works, and how an answer gets back. A kernel
// class is templated on one of these (TensorFlow's pattern: one kernel, a Device parameter):
//  - CpuStaging: the tensors are host memory already; nothing is copied, every callback
//    runs at once on the calling thread;
//  - GpuStaging (CUDA builds): pinned host buffers and TF's own copy streams
//    (gpu_staging.h); callbacks run on TF's event thread when the bytes are there.
// A kernel writes its answer into a host tensor from HostFor and hands it to ToDevice; on
// the CPU that tensor is the output itself.
#ifndef TFPS_KERNELS_STAGING_H_
#define TFPS_KERNELS_STAGING_H_

#include <functional>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tf_ps_ops/kernels/gpu_staging.h"  // TFPS_WITH_CUDA
#include "tf_ps_ops/kernels/tf_adapter.h"

namespace tfps {


struct CpuStaging {
  // Whether host tensors are copies of the device's (else they are the same buffers).
  static constexpr bool kCopies = false;

  // `*host` holds `device`'s values when `then` runs.
  static void ToHost(tensorflow::OpKernelContext*, const tensorflow::Tensor& device,
                     tensorflow::Tensor* host, StatusCallback then) {
    *host = device;
    then(absl::OkStatus());
  }
  // A new host tensor for the engine to write into.
  static absl::Status AllocateHost(tensorflow::OpKernelContext* ctx, tensorflow::DataType dtype,
                                   const tensorflow::TensorShape& shape, tensorflow::Tensor* host) {
    return ctx->allocate_temp(dtype, shape, host);
  }
  // A host tensor whose values ToDevice puts into `device`.
  static absl::Status HostFor(tensorflow::OpKernelContext*, const tensorflow::Tensor& device,
                              tensorflow::Tensor* host) {
    *host = device;
    return absl::OkStatus();
  }
  // `*device` (allocated, `host`'s shape) holds `host`'s values when `then` runs.
  static void ToDevice(tensorflow::OpKernelContext*, const tensorflow::Tensor& host,
                       tensorflow::Tensor* device, StatusCallback then) {
    then(absl::OkStatus());  // `host` is `device` (HostFor) or the same buffer
  }
  // A new device tensor with `host`'s values in `*device` when `then` runs.
  static void ToNewDevice(tensorflow::OpKernelContext*, const tensorflow::Tensor& host,
                          tensorflow::Tensor* device, StatusCallback then) {
    *device = host;
    then(absl::OkStatus());
  }
};

#if TFPS_WITH_CUDA
struct GpuStaging {
  static constexpr bool kCopies = true;

  static void ToHost(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& device,
                     tensorflow::Tensor* host, StatusCallback then) {
    StageToHost(ctx, device, host, std::move(then));
  }
  static absl::Status AllocateHost(tensorflow::OpKernelContext* ctx, tensorflow::DataType dtype,
                                   const tensorflow::TensorShape& shape, tensorflow::Tensor* host) {
    return AllocatePinned(ctx, dtype, shape, host);
  }
  static absl::Status HostFor(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& device,
                              tensorflow::Tensor* host) {
    return AllocatePinned(ctx, device.dtype(), device.shape(), host);
  }
  static void ToDevice(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& host,
                       tensorflow::Tensor* device, StatusCallback then) {
    CopyToDevice(ctx, host, device, std::move(then));
  }
  static void ToNewDevice(tensorflow::OpKernelContext* ctx, const tensorflow::Tensor& host,
                          tensorflow::Tensor* device, StatusCallback then) {
    absl::Status s = ctx->allocate_temp(host.dtype(), host.shape(), device);
    if (!s.ok()) return then(s);
    CopyToDevice(ctx, host, device, std::move(then));
  }
};
#endif  // TFPS_WITH_CUDA

}  // namespace tfps

#endif  // TFPS_KERNELS_STAGING_H_

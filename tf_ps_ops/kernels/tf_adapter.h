// The seam between TensorFlow and the core, for every kernel: core requests from tensors,
// the "not initialised" check, core statuses to TF ones before done(), dtypes both ways,
// a gather's completion. What differs between a kernel's CPU and GPU device: staging.h.
#ifndef TFPS_KERNELS_TF_ADAPTER_H_
#define TFPS_KERNELS_TF_ADAPTER_H_

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/platform/status.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/engine/engine.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

// The core's codes are TF's (common/status.h), so the code carries over as is.
inline absl::Status ToTfStatus(const Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.code()), s.message());
}

inline DType ToWireDType(tensorflow::DataType dt) {
  switch (dt) {
    case tensorflow::DT_HALF: return DType::kFloat16;
    case tensorflow::DT_BFLOAT16: return DType::kBFloat16;
    case tensorflow::DT_FLOAT: return DType::kFloat32;
    case tensorflow::DT_DOUBLE: return DType::kFloat64;
    case tensorflow::DT_INT8: return DType::kInt8;
    case tensorflow::DT_UINT8: return DType::kUInt8;
    case tensorflow::DT_INT32: return DType::kInt32;
    case tensorflow::DT_INT64: return DType::kInt64;
    case tensorflow::DT_UINT16: return DType::kUInt16;
    case tensorflow::DT_INT16: return DType::kInt16;
    case tensorflow::DT_BOOL: return DType::kBool;
    default: return DType::kInvalid;
  }
}

// OK once tf_ps_ops.init() has run; otherwise the one message every op gives, naming `what`
// ("PsPushPull of 'w'").
inline absl::Status RequireInitialised(const std::string& what) {
  if (Engine::Get().initialized()) return absl::OkStatus();
  return absl::FailedPreconditionError("tf_ps_ops is not initialised: call tf_ps_ops.init() "
                                       "before " + what);
}

// How an async kernel ends: a failure goes to TF, then done().
inline void FinishAsync(tensorflow::OpKernelContext* ctx,
                        tensorflow::AsyncOpKernel::DoneCallback done, const absl::Status& s) {
  if (!s.ok()) ctx->SetStatus(s);
  done();
}
// A status handed on when an asynchronous step ends.
using StatusCallback = std::function<void(const absl::Status&)>;

// The engine's completion for an async kernel: the status goes to TF, then done().
inline std::function<void(const Status&)> CompleteWithStatus(
    tensorflow::OpKernelContext* ctx, tensorflow::AsyncOpKernel::DoneCallback done) {
  return [ctx, done](const Status& status) {
    ctx->SetStatus(ToTfStatus(status));
    done();
  };
}

// The engine's completion for a gather (allgather, alltoall, neighbour exchange, SFB): a
// failure, this worker's or a peer's, ends the op; otherwise `take(parts, finish)` reads the
// parts, which live only during this call, and calls `finish` with the op's status, at once
// or later (after a copy to the GPU).
template <typename Take>
std::function<void(const Status&, const std::vector<PeerTensor>&)> CompleteGather(
    tensorflow::OpKernelContext* ctx, tensorflow::AsyncOpKernel::DoneCallback done, Take take) {
  return [ctx, done, take](const Status& status, const std::vector<PeerTensor>& parts) {
    StatusCallback finish = [ctx, done](const absl::Status& s) { FinishAsync(ctx, done, s); };
    if (!status.ok()) return finish(ToTfStatus(status));
    take(parts, finish);
  };
}

// The rows of the gathered parts together (their first dimensions).
inline int64_t GatheredRows(const std::vector<PeerTensor>& parts) {
  int64_t rows = 0;
  for (const PeerTensor& p : parts) rows += p.dims[0];
  return rows;
}

// The tensor part of a request (name, dtype, shape, input bytes), without a copy: the
// request holds a reference to the input's buffer until the engine is done with it.
template <typename Request>
void DescribeInput(const std::string& name, const tensorflow::Tensor& input, Request* r) {
  r->name = name;
  r->dtype = ToWireDType(input.dtype());
  r->dims.clear();
  for (int i = 0; i < input.dims(); ++i) r->dims.push_back(input.dim_size(i));
  r->count = static_cast<uint64_t>(input.NumElements());
  r->input = input.tensor_data().data();
  r->input_holder = std::make_shared<tensorflow::Tensor>(input);
}

// A push_pull request from `input` whose answer goes into `output` (same shape and dtype).
inline PushPullRequest RequestFor(const std::string& name, const tensorflow::Tensor& input,
                                  tensorflow::Tensor* output) {
  PushPullRequest r;
  DescribeInput(name, input, &r);
  r.output = const_cast<char*>(output->tensor_data().data());
  return r;
}

// The parts of a peer exchange (allgather, alltoall), one after the other along the first
// dimension, into `dst`, which holds `rows` rows of the parts' dtype and inner shape.
inline void ConcatenateRows(const std::vector<PeerTensor>& parts, int64_t rows,
                            tensorflow::Tensor* dst) {
  char* out = const_cast<char*>(dst->tensor_data().data());
  const size_t row_bytes = rows == 0 ? 0 : dst->TotalBytes() / rows;
  for (const PeerTensor& p : parts) {
    const size_t bytes = row_bytes * p.dims[0];
    if (bytes > 0) std::memcpy(out, p.data, bytes);
    out += bytes;
  }
}

}  // namespace tfps

#endif  // TFPS_KERNELS_TF_ADAPTER_H_

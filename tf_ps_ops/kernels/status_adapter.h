// The seam between the core and TensorFlow: tensors to core views, core statuses to TF.
#ifndef TFPS_KERNELS_STATUS_ADAPTER_H_
#define TFPS_KERNELS_STATUS_ADAPTER_H_

#include "tensorflow/core/framework/types.h"
#include "tensorflow/core/platform/status.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

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
    default: return DType::kInvalid;
  }
}

}  // namespace tfps

#endif  // TFPS_KERNELS_STATUS_ADAPTER_H_

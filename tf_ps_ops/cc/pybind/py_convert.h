// What the _core module's binding files share: a failed Status as a Python exception, and
// a NumPy dtype as the wire's DType.
#ifndef TFPS_CC_PYBIND_PY_CONVERT_H_
#define TFPS_CC_PYBIND_PY_CONVERT_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

inline void ThrowIfError(const Status& s) {
  if (s.ok()) return;
  // The code travels in the message so tests can match it.
  throw std::runtime_error(s.ToString());
}

inline DType WireDTypeOf(const pybind11::dtype& dt) {
  const DType dtype = DTypeOfElement(dt.kind(), dt.itemsize());
  if (dtype == DType::kInvalid) {
    throw std::invalid_argument("unsupported dtype " + std::string(pybind11::str(dt)));
  }
  return dtype;
}

}  // namespace tfps

#endif  // TFPS_CC_PYBIND_PY_CONVERT_H_

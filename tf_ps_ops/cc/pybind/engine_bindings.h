// The engine part of the _core module (engine_bindings.cc), kept apart from core_module.cc.
#ifndef TFPS_CC_PYBIND_ENGINE_BINDINGS_H_
#define TFPS_CC_PYBIND_ENGINE_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace tfps {
void BindEngine(pybind11::module_& m);
}  // namespace tfps

#endif  // TFPS_CC_PYBIND_ENGINE_BINDINGS_H_

// The codec part of the _core module (codec_bindings.cc), kept apart from core_module.cc.
#ifndef TFPS_CC_PYBIND_CODEC_BINDINGS_H_
#define TFPS_CC_PYBIND_CODEC_BINDINGS_H_

#include <pybind11/pybind11.h>

namespace tfps {
void BindCodecs(pybind11::module_& m);
// The GPU codecs' shared math on the host (codec_shared_bindings.cc), called by BindCodecs.
void BindSharedCodecMath(pybind11::module_& m);
}  // namespace tfps

#endif  // TFPS_CC_PYBIND_CODEC_BINDINGS_H_

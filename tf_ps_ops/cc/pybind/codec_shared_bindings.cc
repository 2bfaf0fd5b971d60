// The GPU codec kernels' host twin (codec/codec_shared.h) for the CPU test that holds the
// shared math to the CPU codecs' bytes (tests/unit/test_codec_shared_math.py).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <stdexcept>

#include "tf_ps_ops/cc/codec/codec.h"
#include "tf_ps_ops/cc/codec/codec_shared.h"
#include "tf_ps_ops/cc/pybind/codec_bindings.h"

namespace py = pybind11;

namespace tfps {
namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;
using ByteArray = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

CodecId SharedId(int id) {
  if (id < 0 || id > kMaxCodecId) throw std::invalid_argument("unknown codec id");
  return static_cast<CodecId>(id);
}

void SharedCheck(const Status& s) {
  if (!s.ok()) throw std::invalid_argument(s.ToString());
}

}  // namespace

void BindSharedCodecMath(py::module_& m) {
  m.def("codec_shared_encode", [](int id, FloatArray in, uint64_t k, uint64_t seed) {
    const uint64_t n = static_cast<uint64_t>(in.size());
    py::array_t<uint8_t> out(static_cast<py::ssize_t>(EncodedBytes(SharedId(id), n, k)));
    SharedCheck(codec_shared::Encode(SharedId(id), in.data(), n, k, seed, out.mutable_data()));
    return out;
  }, py::arg("codec"), py::arg("array"), py::arg("k") = 0, py::arg("seed") = 0,
        "codec_encode through the GPU kernels' shared math, on the host.");
  m.def("codec_shared_decode", [](int id, ByteArray in, uint64_t n, uint64_t seed) {
    uint64_t k = 0;
    SharedCheck(CheckEncoded(SharedId(id), n, static_cast<uint64_t>(in.size()), &k));
    py::array_t<float> out(static_cast<py::ssize_t>(n));
    SharedCheck(codec_shared::Decode(SharedId(id), in.data(), n, k, seed, out.mutable_data()));
    return out;
  }, py::arg("codec"), py::arg("data"), py::arg("n"), py::arg("seed") = 0);
  // (encoded bytes, the new residual): one step of the GPU's error feedback on `residual`.
  m.def("codec_shared_encode_feedback", [](int id, FloatArray in, FloatArray residual,
                                           uint64_t k, uint64_t seed) {
    const uint64_t n = static_cast<uint64_t>(in.size());
    if (static_cast<uint64_t>(residual.size()) != n) {
      throw std::invalid_argument("residual and array differ in size");
    }
    py::array_t<float> e(static_cast<py::ssize_t>(n));
    std::copy(residual.data(), residual.data() + n, e.mutable_data());
    py::array_t<uint8_t> out(static_cast<py::ssize_t>(EncodedBytes(SharedId(id), n, k)));
    SharedCheck(codec_shared::EncodeFeedback(SharedId(id), in.data(), e.mutable_data(), n, k,
                                             seed, out.mutable_data()));
    return py::make_tuple(out, e);
  }, py::arg("codec"), py::arg("array"), py::arg("residual"), py::arg("k") = 0,
        py::arg("seed") = 0);
}

}  // namespace tfps

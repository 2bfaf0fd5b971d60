// The codecs (cc/codec) for tests and benchmarks: encode/decode NumPy float32 arrays, the
// size rules, the randomk seed, and an ErrorFeedback memory.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <chrono>
#include <stdexcept>

#include "tf_ps_ops/cc/codec/codec.h"
#include "tf_ps_ops/cc/codec/codec_internal.h"
#include "tf_ps_ops/cc/codec/error_feedback.h"
#include "tf_ps_ops/cc/pybind/codec_bindings.h"

namespace py = pybind11;

namespace tfps {
namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;
using ByteArray = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;

void Check(const Status& s) {
  if (!s.ok()) throw std::invalid_argument(s.ToString());
}

CodecId IdOf(int id) {
  if (id < 0 || id > kMaxCodecId) throw std::invalid_argument("unknown codec id");
  return static_cast<CodecId>(id);
}

py::array_t<uint8_t> EncodePy(int id, FloatArray in, uint64_t k, uint64_t seed) {
  const uint64_t n = static_cast<uint64_t>(in.size());
  py::array_t<uint8_t> out(static_cast<py::ssize_t>(EncodedBytes(IdOf(id), n, k)));
  Status s;
  {
    py::gil_scoped_release release;
    s = Encode(IdOf(id), in.data(), n, k, seed, out.mutable_data());
  }
  Check(s);
  return out;
}

py::array_t<float> DecodePy(int id, ByteArray in, uint64_t n, uint64_t seed) {
  uint64_t k = 0;
  Check(CheckEncoded(IdOf(id), n, static_cast<uint64_t>(in.size()), &k));
  py::array_t<float> out(static_cast<py::ssize_t>(n));
  Status s;
  {
    py::gil_scoped_release release;
    s = Decode(IdOf(id), in.data(), n, k, seed, out.mutable_data());
  }
  Check(s);
  return out;
}

// sum + the decoding of `in` (DecodeAdd), as a new array.
py::array_t<float> DecodeAddPy(int id, ByteArray in, FloatArray sum) {
  const uint64_t n = static_cast<uint64_t>(sum.size());
  uint64_t k = 0;
  Check(CheckEncoded(IdOf(id), n, static_cast<uint64_t>(in.size()), &k));
  py::array_t<float> out(static_cast<py::ssize_t>(n));
  std::copy(sum.data(), sum.data() + n, out.mutable_data());
  Check(DecodeAdd(IdOf(id), in.data(), n, out.mutable_data()));
  return out;
}

// Seconds per call of encode and of decode over `in`, best of `repeat` (for the speed
// table in docs/compression.md; no Python in the timed loop).
py::tuple TimeCodecPy(int id, FloatArray in, uint64_t k, int repeat) {
  const uint64_t n = static_cast<uint64_t>(in.size());
  std::vector<uint8_t> enc(EncodedBytes(IdOf(id), n, k));
  std::vector<float> dec(n);
  double best_enc = 1e30, best_dec = 1e30;
  py::gil_scoped_release release;
  for (int r = 0; r < repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    Check(Encode(IdOf(id), in.data(), n, k, 7, enc.data()));
    auto t1 = std::chrono::steady_clock::now();
    Check(Decode(IdOf(id), enc.data(), n, k, 7, dec.data()));
    auto t2 = std::chrono::steady_clock::now();
    best_enc = std::min(best_enc, std::chrono::duration<double>(t1 - t0).count());
    best_dec = std::min(best_dec, std::chrono::duration<double>(t2 - t1).count());
  }
  py::gil_scoped_acquire acquire;
  return py::make_tuple(best_enc, best_dec);
}

// Seconds per call of DecodeAdd of in's encoding into a float32 sum, best of `repeat`.
double TimeDecodeAddPy(int id, FloatArray in, int repeat) {
  const uint64_t n = static_cast<uint64_t>(in.size());
  std::vector<uint8_t> enc(EncodedBytes(IdOf(id), n, 0));
  Check(Encode(IdOf(id), in.data(), n, 0, 7, enc.data()));
  std::vector<float> sum(in.data(), in.data() + n);
  double best = 1e30;
  py::gil_scoped_release release;
  for (int r = 0; r < repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    Check(DecodeAdd(IdOf(id), enc.data(), n, sum.data()));
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

}  // namespace

void BindCodecs(py::module_& m) {
  py::dict ids;
  for (int i = 0; i <= kMaxCodecId; ++i) ids[CodecIdName(static_cast<CodecId>(i))] = i;
  m.attr("CODECS") = ids;
  m.attr("CODEC_CHUNK") = kChunk;
  BindSharedCodecMath(m);
  m.def("parse_codec", [](const std::string& text) {
    CodecSpec spec;
    Check(ParseCodec(text, &spec));
    return py::make_tuple(static_cast<int>(spec.id), spec.ratio, CodecName(spec));
  }, py::arg("text"), "Returns (codec id, ratio, canonical name); raises on a bad name.");
  m.def("sparse_k", &SparseK, py::arg("ratio"), py::arg("n"));
  m.def("encoded_bytes",
        [](int id, uint64_t n, uint64_t k) { return EncodedBytes(IdOf(id), n, k); }, py::arg("codec"), py::arg("n"), py::arg("k") = 0);
  m.def("check_encoded", [](int id, uint64_t n, uint64_t bytes) -> py::object {
    uint64_t k = 0;
    Status s = CheckEncoded(IdOf(id), n, bytes, &k);
    if (!s.ok()) return py::str(s.ToString());
    return py::int_(k);
  }, py::arg("codec"), py::arg("n"), py::arg("bytes"), "k, or the error text.");
  m.def("codec_wants_error_feedback", [](int id) { return CodecWantsErrorFeedback(IdOf(id)); });
  m.def("randomk_seed", &RandomKSeed, py::arg("key"), py::arg("partition"), py::arg("step"));
  m.def("codec_encode", &EncodePy, py::arg("codec"), py::arg("array"), py::arg("k") = 0,
        py::arg("seed") = 0, "float32 array -> encoded bytes (uint8 array).");
  m.def("codec_decode", &DecodePy, py::arg("codec"), py::arg("data"), py::arg("n"),
        py::arg("seed") = 0, "encoded bytes -> float32 array of n (k from the size).");
  m.def("time_codec", &TimeCodecPy, py::arg("codec"), py::arg("array"), py::arg("k") = 0,
        py::arg("repeat") = 5, "(encode seconds, decode seconds), best of repeat.");

  m.def("codec_decode_add", &DecodeAddPy, py::arg("codec"), py::arg("data"), py::arg("sum"),
        "sum + the decoding of data (onebit, int8: decoded straight into the sum).");
  m.def("time_decode_add", &TimeDecodeAddPy, py::arg("codec"), py::arg("array"),
        py::arg("repeat") = 5, "seconds of DecodeAdd into a float32 sum, best of repeat");
  m.def("codec_decodes_adding", [](int id) { return CodecDecodesAdding(IdOf(id)); });
  // The onebit loops' instruction set: "scalar" or "avx2" (tests and benchmarks compare
  // them). With an argument, asks for it (clamped to what the CPU has); returns the one
  // now active.
  m.def("codec_simd", [](const std::string& wanted) {
    using codec_internal::Simd;
    if (wanted == "scalar") codec_internal::SetSimd(Simd::kScalar);
    else if (wanted == "avx2") codec_internal::SetSimd(Simd::kAvx2);
    else if (wanted == "best") codec_internal::SetSimd(codec_internal::BestSimd());
    else if (!wanted.empty()) throw std::invalid_argument("codec_simd: scalar, avx2 or best");
    return codec_internal::ActiveSimd() == Simd::kAvx2 ? "avx2" : "scalar";
  }, py::arg("wanted") = "");

  py::class_<ErrorFeedback>(m, "ErrorFeedback")
      .def(py::init<>())
      .def("encode", [](ErrorFeedback& ef, uint64_t key, uint32_t partition, int id,
                        FloatArray in, uint64_t k, uint64_t seed) {
        const uint64_t n = static_cast<uint64_t>(in.size());
        py::array_t<uint8_t> out(static_cast<py::ssize_t>(EncodedBytes(IdOf(id), n, k)));
        Check(ef.Encode(key, partition, IdOf(id), in.data(), n, k, seed, out.mutable_data()));
        return out;
      }, py::arg("key"), py::arg("partition"), py::arg("codec"), py::arg("array"),
         py::arg("k") = 0, py::arg("seed") = 0)
      .def("residual", [](const ErrorFeedback& ef, uint64_t key, uint32_t partition) {
        std::vector<float> r = ef.Residual(key, partition);
        py::array_t<float> out(static_cast<py::ssize_t>(r.size()));
        std::copy(r.begin(), r.end(), out.mutable_data());
        return out;
      })
      .def("__len__", &ErrorFeedback::size)
      .def("clear", &ErrorFeedback::Clear);
}

}  // namespace tfps

// The GPU codec kernels' host twin (codec/codec_shared.h) for the CPU test that holds the
// shared math to the CPU codecs' bytes (tests/unit/test_codec_shared_math.py); and the
// engine's DeviceCodec hook (engine/device_codec.h) driven by that twin on the host, so the
// engine's side of GPU compression (partitions, seeds, steps, per-partition feedback,
// replies, fusion) runs in CPU tests exactly as a GPU kernel drives it
// (tests/multiprocess/test_device_codec_hook.py). The twin runs the GPU kernels' algorithms,
// so this is GpuPushCodec (kernels/gpu_push_codec.*) with host memory in place of device
// memory.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <future>
#include <map>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "tf_ps_ops/cc/codec/codec.h"
#include "tf_ps_ops/cc/codec/codec_shared.h"
#include "tf_ps_ops/cc/engine/device_codec.h"
#include "tf_ps_ops/cc/engine/engine.h"
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

// GpuPushCodec's logic with the shared-math twin on host memory. Residuals per (key,
// partition) for the process, as the GPU keeps them per device.
class HostTwinCodec : public DeviceCodec {
 public:
  HostTwinCodec(const float* input, float* output, uint64_t count)
      : input_(input), output_(output), count_(count) {}

  Status EncodeParts(const CodecSpec& spec, bool feedback, uint64_t key, uint64_t step,
                     const std::vector<Partition>& parts, std::vector<HostBytes>* out) override {
    out->assign(parts.size(), HostBytes());
    ++encode_calls;
    for (const Partition& p : parts) {
      if (p.offset + p.count > count_) return Internal("a partition past the tensor's end");
      const uint64_t k = SparseK(spec.ratio, p.count);
      const uint64_t seed = RandomKSeed(key, p.index, step);
      auto bytes = std::make_shared<std::vector<uint8_t>>(EncodedBytes(spec.id, p.count, k));
      if (feedback && CodecWantsErrorFeedback(spec.id)) {
        std::vector<float>& e = Residuals()[{key, p.index}];
        if (e.size() != p.count) e.assign(p.count, 0.0f);
        TFPS_RETURN_IF_ERROR(codec_shared::EncodeFeedback(spec.id, input_ + p.offset, e.data(),
                                                          p.count, k, seed, bytes->data()));
      } else {
        TFPS_RETURN_IF_ERROR(codec_shared::Encode(spec.id, input_ + p.offset, p.count, k, seed,
                                                  bytes->data()));
      }
      (*out)[p.index] = HostBytes{bytes->data(), bytes->size(), bytes};
    }
    return Status::Ok();
  }

  Status TakeReply(CodecId id, const Partition& part, uint64_t k, uint64_t seed,
                   const void* payload, uint64_t size) override {
    ++replies;
    return codec_shared::Decode(id, static_cast<const uint8_t*>(payload), part.count, k, seed,
                                output_ + part.offset);
  }

  int encode_calls = 0, replies = 0;

 private:
  static std::map<std::pair<uint64_t, uint32_t>, std::vector<float>>& Residuals() {
    static auto* residuals = new std::map<std::pair<uint64_t, uint32_t>, std::vector<float>>();
    return *residuals;
  }
  const float* input_;
  float* output_;
  uint64_t count_;
};

PushPullRequest FloatRequest(const std::string& name, const FloatArray& in, float* out,
                             const std::string& compression, int error_feedback) {
  PushPullRequest request;
  request.name = name;
  request.dtype = DType::kFloat32;
  for (py::ssize_t i = 0; i < in.ndim(); ++i) request.dims.push_back(in.shape(i));
  request.count = static_cast<uint64_t>(in.size());
  request.input = in.data();
  request.output = out;
  if (!compression.empty()) {
    CodecSpec spec;
    SharedCheck(ParseCodec(compression, &spec));
    request.codec = spec;
  }
  request.error_feedback = error_feedback;
  request.input_holder = std::make_shared<int>(0);  // the arrays outlive the wait
  return request;
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

  // The engine's answer to a GPU kernel (Engine::EncodesOnDevice) for a float32 push_pull
  // of `array` named `name` (root_rank >= 0: a broadcast; ps_apply: a PS-mode gradient):
  // the codec name, or None.
  m.def("encodes_on_device", [](const std::string& name, FloatArray array,
                                const std::string& compression, int root_rank,
                                bool ps_apply) -> py::object {
    PushPullRequest request = FloatRequest(name, array, nullptr, compression, -1);
    request.root_rank = root_rank;
    if (ps_apply) request.flags = kFlagPsApply;
    CodecSpec spec;
    if (!Engine::Get().EncodesOnDevice(request, &spec)) return py::none();
    return py::str(CodecName(spec));
  }, py::arg("name"), py::arg("array"), py::arg("compression") = "",
        py::arg("root_rank") = -1, py::arg("ps_apply") = false);
  // Blocking push_pull of float32 arrays started together, each through the DeviceCodec
  // hook driven by the host twin (as a GPU kernel's GpuPushCodec would), or with
  // hook=False through the engine's CPU codecs: returns (the sums, [(EncodeParts calls,
  // replies taken)] per array).
  m.def("push_pull_device_codec", [](const std::vector<std::string>& names,
                                     const std::vector<FloatArray>& arrays,
                                     const std::string& compression, int error_feedback,
                                     bool hook) {
    if (names.size() != arrays.size()) throw std::invalid_argument("one name per array");
    std::vector<py::array_t<float>> outs;
    std::vector<std::shared_ptr<HostTwinCodec>> codecs;
    std::vector<PushPullRequest> requests;
    std::vector<std::promise<Status>> promises(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      outs.emplace_back(std::vector<py::ssize_t>(arrays[i].shape(),
                                                 arrays[i].shape() + arrays[i].ndim()));
      PushPullRequest request = FloatRequest(names[i], arrays[i], outs.back().mutable_data(),
                                             compression, error_feedback);
      CodecSpec spec;
      if (!Engine::Get().EncodesOnDevice(request, &spec)) {
        throw std::invalid_argument("'" + names[i] + "' would not be compressed");
      }
      codecs.push_back(std::make_shared<HostTwinCodec>(
          arrays[i].data(), outs.back().mutable_data(), request.count));
      if (hook) request.device_codec = codecs.back();
      std::promise<Status>* promise = &promises[i];
      request.done = [promise](const Status& s) { promise->set_value(s); };
      requests.push_back(std::move(request));
    }
    Status status;
    {
      py::gil_scoped_release release;
      Engine::Get().EnqueueAll(std::move(requests));
      for (auto& promise : promises) {
        Status s = promise.get_future().get();
        if (status.ok()) status = s;
      }
    }
    SharedCheck(status);
    py::list counts;
    for (const auto& c : codecs) counts.append(py::make_tuple(c->encode_calls, c->replies));
    return py::make_tuple(outs, counts);
  }, py::arg("names"), py::arg("arrays"), py::arg("compression") = "",
        py::arg("error_feedback") = -1, py::arg("hook") = true);
}

}  // namespace tfps

// The engine part of the _core module (engine_bindings.h): a blocking client of the
// worker's engine for tests and tools, NumPy arrays in and out with the GIL released while
// it waits: init and shutdown, push_pull, ps_push_pull, allgather, join, abort_collective,
// the engine's counters and its testing pauses.
#include "tf_ps_ops/cc/pybind/engine_bindings.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <future>
#include <optional>
#include <thread>

#include "tf_ps_ops/cc/engine/abort_request.h"
#include "tf_ps_ops/cc/engine/engine.h"
#include "tf_ps_ops/cc/engine/join.h"
#include "tf_ps_ops/cc/engine/local/shm_local_reduce.h"
#include "tf_ps_ops/cc/pybind/py_convert.h"

namespace py = pybind11;

namespace tfps {
namespace {

// A call that failed early (one partition's error ends it) can return while ZeroMQ still
// holds unsent pushes of its input (another server's, or a batch not yet flushed): the
// arrays must outlive them, or ZeroMQ sends from freed memory (EFAULT: it aborts). So
// wait, bounded, until ZeroMQ let go of every holder; GIL released.
void WaitUntilReleased(const std::vector<std::shared_ptr<void>>& holders) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (const auto& holder : holders) {
    while (holder.use_count() > 1 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

// Blocking push_pull of arrays enqueued together (one engine wake-up, like a grouped
// allreduce: small ones share messages, TFPS_FUSION_BYTES); returns the sums (or, with
// root_rank >= 0, root's arrays).
// `compression`: a codec name (cc/codec), "" for the job default; `error_feedback` -1/0/1.
std::vector<py::array> PushPullArrays(const std::vector<std::string>& names,
                                      const std::vector<py::array>& inputs, int root_rank,
                                      const std::string& compression = "",
                                      int error_feedback = -1) {
  std::optional<CodecSpec> codec;
  if (!compression.empty()) {
    CodecSpec spec;
    ThrowIfError(ParseCodec(compression, &spec));
    codec = spec;
  }
  if (names.size() != inputs.size()) throw std::invalid_argument("one name per array");
  std::vector<py::array> ins, outs;
  std::vector<PushPullRequest> requests(names.size());
  std::vector<std::promise<Status>> promises(names.size());
  std::vector<std::shared_ptr<void>> holders;
  for (size_t k = 0; k < names.size(); ++k) {
    ins.push_back(py::array::ensure(inputs[k], py::array::c_style));
    const py::array& in = ins.back();
    outs.emplace_back(in.dtype(), std::vector<py::ssize_t>(in.shape(), in.shape() + in.ndim()));
    PushPullRequest& request = requests[k];
    request.name = names[k];
    request.dtype = WireDTypeOf(in.dtype());
    for (py::ssize_t i = 0; i < in.ndim(); ++i) request.dims.push_back(in.shape(i));
    request.count = static_cast<uint64_t>(in.size());
    request.input = in.data();
    request.output = outs.back().mutable_data();
    request.root_rank = root_rank;
    request.codec = codec;
    request.error_feedback = error_feedback;
    // `ins` and `outs` stay referenced until the waits below return; the holder only has
    // to outlive ZeroMQ's use of the input, which ends before the reply arrives.
    request.input_holder = std::make_shared<int>(0);
    holders.push_back(request.input_holder);
    std::promise<Status>* promise = &promises[k];
    request.done = [promise](const Status& s) { promise->set_value(s); };
  }
  Status status;
  {
    py::gil_scoped_release release;
    Engine::Get().EnqueueAll(std::move(requests));
    for (auto& promise : promises) {
      Status s = promise.get_future().get();
      if (status.ok()) status = s;
    }
    WaitUntilReleased(holders);
  }
  ThrowIfError(status);
  return outs;
}

// One blocking PS-mode push of a float array, as the PsApplyXXX / PsInitVariable kernels
// send it: `optimizer` 0 is an init (rank 0's value; every worker gets the parameter held),
// else a dense gradient the servers average and apply with `params` (optimizer_spec.h's
// order, then the slots' initial values); returns the parameter the servers answered.
// For tests of PS mode without TensorFlow (compressed gradients: docs/compression.md).
py::array PsPushPullPy(const std::string& name, py::array input, int optimizer,
                       const std::vector<double>& params, const std::string& compression,
                       int error_feedback) {
  py::array in = py::array::ensure(input, py::array::c_style);
  py::array out(in.dtype(), std::vector<py::ssize_t>(in.shape(), in.shape() + in.ndim()));
  PushPullRequest request;
  request.name = name;
  request.dtype = WireDTypeOf(in.dtype());
  for (py::ssize_t i = 0; i < in.ndim(); ++i) request.dims.push_back(in.shape(i));
  request.count = static_cast<uint64_t>(in.size());
  request.input = in.data();
  request.output = out.mutable_data();
  request.input_holder = std::make_shared<int>(0);  // `in` outlives the wait below
  const std::vector<std::shared_ptr<void>> holders = {request.input_holder};
  if (optimizer == 0) {
    request.root_rank = 0;
    request.flags = kFlagPsInit;
  } else {
    request.flags = kFlagPsApply;
    request.optimizer = static_cast<Optimizer>(optimizer);
    request.params = params;
  }
  if (!compression.empty()) {
    CodecSpec spec;
    ThrowIfError(ParseCodec(compression, &spec));
    request.codec = spec;
  }
  request.error_feedback = error_feedback;
  std::promise<Status> promise;
  request.done = [&promise](const Status& s) { promise.set_value(s); };
  Status status;
  {
    py::gil_scoped_release release;
    Engine::Get().Enqueue(std::move(request));
    status = promise.get_future().get();
    WaitUntilReleased(holders);
  }
  ThrowIfError(status);
  return out;
}

py::list AllgatherPy(const std::string& name, py::array input) {
  py::array in = py::array::ensure(input, py::array::c_style);
  GatherRequest request;
  request.name = name;
  request.dtype = WireDTypeOf(in.dtype());
  for (py::ssize_t i = 0; i < in.ndim(); ++i) request.dims.push_back(in.shape(i));
  request.count = static_cast<uint64_t>(in.size());
  // The allgather completes when every peer's part has arrived, which can be before ZeroMQ
  // has sent ours to a slower peer: the bytes sent must outlive this call, so they are a
  // copy owned by the holder (dropping a reference to `in` would need the GIL).
  const char* data = static_cast<const char*>(in.data());
  auto copy = std::make_shared<std::vector<char>>(data, data + in.nbytes());
  request.input = copy->data();
  request.input_holder = copy;
  std::promise<Status> promise;
  std::vector<std::vector<char>> bytes;
  std::vector<std::vector<int64_t>> dims;
  const size_t elem = in.itemsize();
  request.done = [&](const Status& s, const std::vector<PeerTensor>& parts) {
    for (const PeerTensor& p : parts) {  // copy out: the parts die with the callback
      size_t n = elem;
      for (int64_t d : p.dims) n *= static_cast<size_t>(d);
      const char* data = static_cast<const char*>(p.data);
      bytes.emplace_back(data, data + (data == nullptr ? 0 : n));
      dims.push_back(p.dims);
    }
    promise.set_value(s);
  };
  Status status;
  {
    py::gil_scoped_release release;
    Engine::Get().EnqueueGather(std::move(request));
    status = promise.get_future().get();
  }
  ThrowIfError(status);
  py::list out;
  for (size_t r = 0; r < bytes.size(); ++r) {
    py::array a(in.dtype(), std::vector<py::ssize_t>(dims[r].begin(), dims[r].end()));
    if (!bytes[r].empty()) std::memcpy(a.mutable_data(), bytes[r].data(), bytes[r].size());
    out.append(a);
  }
  return out;
}

}  // namespace

void BindEngine(py::module_& m) {
  m.def("init", [](const std::string& host, int port, int rank, int size, int num_servers) {
    EngineOptions o{host, port, rank, size, num_servers};
    Status s;
    {
      py::gil_scoped_release release;
      s = Engine::Get().Init(o);
    }
    ThrowIfError(s);
  });
  m.def("shutdown", [] {
    py::gil_scoped_release release;
    Engine::Get().Shutdown();
  });
  m.def("rank", [] { return Engine::Get().rank(); });
  m.def("size", [] { return Engine::Get().size(); });
  m.def("local_rank", [] { return Engine::Get().local_rank(); });
  m.def("local_size", [] { return Engine::Get().local_size(); });
  m.def("abort_collective", [](const std::string& name, const std::string& reason) {
    // What PsAbortCollective (path "server") enqueues; blocks until the servers (or the
    // local leader) answered, as the op does.
    auto finished = std::make_shared<std::promise<void>>();
    std::future<void> done = finished->get_future();
    PushPullRequest request =
        AbortRoundRequest(name, reason, [finished](const Status&) { finished->set_value(); });
    py::gil_scoped_release release;
    Engine::Get().Enqueue(std::move(request));
    done.wait();
  }, py::arg("name"), py::arg("reason"),
        "Uses up this worker's next call of `name` without data (PsAbortCollective's "
        "server path): the others' call fails with FailedPrecondition naming `reason`.");
  m.def("join", [] {
    int last = -1;
    Status s;
    {
      py::gil_scoped_release release;
      s = JoinJob(Engine::Get(), &last);
    }
    ThrowIfError(s);
    return last;
  }, "hvd.join(): waits until every worker has joined; returns the last rank to join.");
  m.def("pause_next_local_take_for_testing", &ShmLocalReduce::SetTakePauseForTesting,
        py::arg("seconds"),
        "Tests only: this process's next take of 3+ local workers' inputs (hierarchical "
        "aggregation, as the leader) pauses after taking local rank 1's.");
  m.def("pause_next_join_end_for_testing", &SetJoinEndPauseForTesting, py::arg("seconds"),
        "Tests only: this process's next join() waits this long after the servers' answer "
        "before it stops serving its local members' steps (hierarchical aggregation).");
  m.def("push_pull", [](const std::string& name, py::array array, int root_rank,
                        const std::string& compression, int error_feedback) {
    return PushPullArrays({name}, {array}, root_rank, compression, error_feedback)[0];
  }, py::arg("name"), py::arg("array"), py::arg("root_rank") = -1,
        py::arg("compression") = "", py::arg("error_feedback") = -1,
        "Blocking push_pull of a NumPy array; returns the sum (or root's array). "
        "compression: a codec name, '' for TFPS_COMPRESSION.");
  m.def("push_pull_group", [](const std::vector<std::string>& names,
                              const std::vector<py::array>& arrays) {
    return PushPullArrays(names, arrays, -1);
  }, py::arg("names"), py::arg("arrays"),
        "Blocking push_pull of several arrays started together; returns the sums.");
  m.def("ps_push_pull", &PsPushPullPy, py::arg("name"), py::arg("array"),
        py::arg("optimizer") = 0, py::arg("params") = std::vector<double>(),
        py::arg("compression") = "", py::arg("error_feedback") = -1,
        "Blocking PS-mode push: optimizer 0 initialises the parameter (rank 0's value), "
        "else the gradient is averaged and applied with params; returns the parameter.");
  m.def("allgather", &AllgatherPy, py::arg("name"), py::arg("array"),
        "Blocking peer-to-peer allgather; returns every worker's array in rank order.");
  m.def("stats", [] {
    EngineStats s = Engine::Get().stats();
    py::dict d;
    d["bytes_sent"] = s.bytes_sent;
    d["bytes_received"] = s.bytes_received;
    d["messages_sent"] = s.messages_sent;
    d["peer_bytes_sent"] = s.peer_bytes_sent;
    d["peer_bytes_received"] = s.peer_bytes_received;
    d["parts_sent"] = s.parts_sent;
    d["batches_sent"] = s.batches_sent;
    d["batches_received"] = s.batches_received;
    d["codec_raw_bytes"] = s.codec_raw_bytes;
    d["codec_encoded_bytes"] = s.codec_encoded_bytes;
    d["codec_micros"] = s.codec_micros;
    d["shm_parts_sent"] = s.shm_parts_sent;
    return d;
  });
}

}  // namespace tfps

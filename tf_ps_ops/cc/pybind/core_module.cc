// tf_ps_ops._core: the C++ core exposed to tests and tools without TensorFlow — the wire
// format, the rendezvous messages, partitioning, the config table, and a blocking client of
// the engine. Server internals have their own binding (ps_server/testing/server_module.cc).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <future>
#include <optional>
#include <thread>

#include "tf_ps_ops/cc/cluster/messages.h"
#include "tf_ps_ops/cc/common/config.h"
#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/common/loop_thread.h"
#include "tf_ps_ops/cc/common/rate_limit.h"
#include "tf_ps_ops/cc/engine/abort_request.h"
#include "tf_ps_ops/cc/engine/local/device_reduce.h"
#include "tf_ps_ops/cc/engine/engine.h"
#include "tf_ps_ops/cc/engine/join.h"
#include "tf_ps_ops/cc/engine/partition.h"
#include "tf_ps_ops/cc/engine/local/shm_local_reduce.h"
#include "tf_ps_ops/cc/pybind/codec_bindings.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace py = pybind11;

namespace tfps {
namespace {

void ThrowIfError(const Status& s) {
  if (s.ok()) return;
  // The code travels in the message so tests can match it.
  throw std::runtime_error(s.ToString());
}

DType WireDTypeOf(const py::dtype& dt) {
  const DType dtype = DTypeOfElement(dt.kind(), dt.itemsize());
  if (dtype == DType::kInvalid) {
    throw std::invalid_argument("unsupported dtype " + std::string(py::str(dt)));
  }
  return dtype;
}

py::bytes EncodeHeadPy(const py::dict& fields, const std::vector<int64_t>& dims,
                       const std::vector<double>& params) {
  Head head;
  Header& h = head.header;
  auto get = [&](const char* k, uint64_t dflt) {
    return fields.contains(k) ? fields[k].cast<uint64_t>() : dflt;
  };
  h.magic = static_cast<uint32_t>(get("magic", kMagic));
  h.version = static_cast<uint16_t>(get("version", kProtocolVersion));
  h.type = static_cast<uint16_t>(get("type", 0));
  h.key = get("key", 0);
  h.partition = static_cast<uint32_t>(get("partition", 0));
  h.num_partitions = static_cast<uint32_t>(get("num_partitions", 0));
  h.step = get("step", 0);
  h.dtype = static_cast<uint8_t>(get("dtype", 0));
  h.flags = static_cast<uint32_t>(get("flags", 0));
  h.sender = fields.contains("sender") ? fields["sender"].cast<int32_t>() : -1;
  h.status = static_cast<uint16_t>(get("status", 0));
  h.codec = static_cast<uint8_t>(get("codec", 0));
  h.reduce_op = static_cast<uint8_t>(get("reduce_op", 0));
  h.count = get("count", 0);
  h.total_count = get("total_count", 0);
  h.optimizer = static_cast<uint8_t>(get("optimizer", 0));
  head.dims = dims;
  head.params = params;
  if (fields.contains("members")) head.members = fields["members"].cast<std::vector<int32_t>>();
  return py::bytes(EncodeHead(head));
}

py::tuple DecodeHeadPy(const py::bytes& frame, size_t payload_size) {
  const std::string data = frame;
  Head head;
  Status s = DecodeHead(data.data(), data.size(), payload_size, &head);
  if (!s.ok()) return py::make_tuple(s.ToString(), py::none());
  const Header& h = head.header;
  py::dict d;
  d["magic"] = h.magic;
  d["version"] = h.version;
  d["type"] = h.type;
  d["key"] = h.key;
  d["partition"] = h.partition;
  d["num_partitions"] = h.num_partitions;
  d["step"] = h.step;
  d["dtype"] = h.dtype;
  d["flags"] = h.flags;
  d["sender"] = h.sender;
  d["status"] = h.status;
  d["codec"] = h.codec;
  d["reduce_op"] = h.reduce_op;
  d["params"] = head.params;
  d["count"] = h.count;
  d["total_count"] = h.total_count;
  d["dims"] = head.dims;
  d["members"] = head.members;
  return py::make_tuple(py::none(), d);
}

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

// The rendezvous messages (cluster/messages.h) as dicts, for tests of their strict parsing.
py::dict ParseRegisterPy(const std::string& text) {
  RegisterRequest r;
  ThrowIfError(ParseRegister(text, &r));
  py::dict d;
  d["role"] = r.role == Role::kServer ? "server" : "worker";
  d["host"] = r.host;
  d["port"] = r.port;
  d["more_ports"] = r.more_ports;
  d["rank"] = r.rank;
  d["size"] = r.size;
  d["consistency"] = ConsistencyName(r.consistency);
  return d;
}

py::dict ParseRegisterReplyPy(const std::string& text) {
  bool ready = false;
  std::string waiting;
  ClusterView view;
  ThrowIfError(ParseRegisterReply(text, &ready, &waiting, &view));
  py::dict d;
  d["ready"] = ready;
  d["waiting"] = waiting;
  d["servers"] = view.servers;
  d["server_ports"] = view.server_ports;
  d["workers"] = view.worker_hosts;
  d["peers"] = view.worker_peers;
  d["server_id"] = view.server_id;
  d["consistency"] = ConsistencyName(view.consistency);
  return d;
}

// The consistency model as ParseConsistency reads it, for tests: (kind, staleness, name).
py::tuple ParseConsistencyPy(const std::string& text) {
  Consistency c;
  ThrowIfError(ParseConsistency("TFPS_CONSISTENCY", text, &c));
  static const char* kKinds[] = {"bsp", "ssp", "asp"};
  return py::make_tuple(kKinds[c.kind], c.staleness, ConsistencyName(c));
}

Consistency ConsistencyOf(const std::string& text) {
  Consistency c;
  if (!text.empty()) ThrowIfError(ParseConsistency("consistency", text, &c));
  return c;
}

}  // namespace
}  // namespace tfps

PYBIND11_MODULE(_core, m) {
  using namespace tfps;
  m.doc() = "tf_ps_ops C++ core, for tests and tools (no TensorFlow).";
  m.attr("MAGIC") = kMagic;
  m.attr("PROTOCOL_VERSION") = kProtocolVersion;
  m.attr("HEADER_BYTES") = sizeof(Header);
  py::dict types;  // from the one list in wire/message.h
  for (const MsgTypeInfo& t : kMsgTypeTable) types[t.name] = static_cast<int>(t.type);
  m.attr("MSG_TYPES") = types;
  m.attr("MAX_MSG_TYPE") = kMaxMsgType;
  m.attr("FLAG_NO_DATA") = kFlagNoData;
  m.attr("FLAG_PS_INIT") = kFlagPsInit;
  m.attr("FLAG_PS_APPLY") = kFlagPsApply;
  m.attr("FLAG_PS_OVERWRITE") = kFlagPsOverwrite;
  m.attr("FLAG_PS_SLOT") = kFlagPsSlot;
  m.attr("FLAG_SPARSE") = kFlagSparse;
  m.attr("FLAG_TIMED") = kFlagTimed;
  m.attr("FLAG_ACK") = kFlagAck;
  m.attr("FLAG_NO_FEEDBACK") = kFlagNoFeedback;
  m.attr("FLAG_BROADCAST") = kFlagBroadcast;
  m.attr("FLAG_ABORT") = kFlagAbort;
  m.attr("FLAG_ABORT_ROUND") = kFlagAbortRound;
  m.attr("FLAG_HIERARCHICAL") = kFlagHierarchical;
  m.attr("FLAG_SHM_REFUSED") = kFlagShmRefused;
  m.attr("FLAG_PROCESS_SET") = kFlagProcessSet;
  m.attr("FLAG_JOIN_LEADS") = kFlagJoinLeads;
  m.attr("FLAG_JOIN_RELEASE") = kFlagJoinRelease;
  m.attr("MAX_BATCH") = kMaxBatch;
  BindCodecs(m);

  m.def("encode_head", &EncodeHeadPy, py::arg("fields"), py::arg("dims") = std::vector<int64_t>(),
        py::arg("params") = std::vector<double>());
  m.def("decode_head", &DecodeHeadPy, py::arg("frame"), py::arg("payload_size"),
        "Returns (error or None, fields dict or None).");
  m.def("check_batch", [](const py::bytes& head_frame, size_t frames_after) -> py::object {
    const std::string frame = head_frame;
    Head head;
    Status s = DecodeHead(frame.data(), frame.size(), 0, &head);
    if (s.ok() && head.header.type != static_cast<uint16_t>(MsgType::kBatch)) {
      s = InvalidArgument("not a batch head");
    }
    if (s.ok()) s = CheckBatch(head.header, frames_after);
    return s.ok() ? py::object(py::none()) : py::object(py::str(s.message()));
  }, py::arg("head_frame"), py::arg("frames_after"),
     "None if a batch head and the frames after it are well formed, else the error.");
  m.def("wire_dtype", [](const py::dtype& dt) { return static_cast<int>(WireDTypeOf(dt)); });
  m.def("key_of_name", &KeyOfName);
  m.def("server_of_partition", &ServerOfPartition);
  m.def("partition_tensor",
        [](uint64_t key, uint64_t total, size_t elem, int64_t part_bytes, int servers,
           uint64_t row_elems) {
          std::vector<py::tuple> out;
          for (const Partition& p :
               PartitionTensor(key, total, elem, part_bytes, servers, row_elems)) {
            out.push_back(py::make_tuple(p.index, p.offset, p.count, p.server));
          }
          return out;
        },
        py::arg("key"), py::arg("total"), py::arg("elem"), py::arg("part_bytes"),
        py::arg("servers"), py::arg("row_elems") = 1);
  m.def("parse_register", &ParseRegisterPy, py::arg("text"),
        "Parses a kRegister payload strictly; raises naming the bad field.");
  m.def("parse_consistency", &ParseConsistencyPy, py::arg("text"),
        "Parses a TFPS_CONSISTENCY value: (kind, staleness, canonical name); raises if bad.");
  m.def("format_register", [](const std::string& role, const std::string& host, int port,
                              int rank, int size, const std::string& consistency,
                              const std::vector<int>& more_ports) {
    RegisterRequest r;
    r.more_ports = more_ports;
    r.consistency = ConsistencyOf(consistency);
    r.role = role == "server" ? Role::kServer : Role::kWorker;
    r.host = host;
    r.port = port;
    r.rank = rank;
    r.size = size;
    return FormatRegister(r);
  }, py::arg("role"), py::arg("host") = "", py::arg("port") = 0, py::arg("rank") = -1,
     py::arg("size") = 0, py::arg("consistency") = "",
     py::arg("more_ports") = std::vector<int>());
  m.def("parse_register_reply", &ParseRegisterReplyPy, py::arg("text"),
        "Parses a kRegisterReply payload strictly; raises naming the bad field.");
  m.def("format_cluster_view", [](const std::vector<std::string>& servers,
                                  const std::vector<std::string>& workers,
                                  const std::vector<std::string>& peers, int server_id,
                                  const std::string& consistency,
                                  const std::vector<std::vector<int>>& server_ports) {
    ClusterView view;
    view.servers = servers;
    view.server_ports = server_ports;
    view.worker_hosts = workers;
    view.worker_peers = peers;
    view.server_id = server_id;
    view.consistency = ConsistencyOf(consistency);
    return FormatClusterView(view);
  }, py::arg("servers"), py::arg("workers"), py::arg("peers"), py::arg("server_id") = -1,
     py::arg("consistency") = "", py::arg("server_ports") = std::vector<std::vector<int>>());
  m.def("server_address_for", [](const std::vector<std::string>& servers,
                                 const std::vector<std::vector<int>>& server_ports, int server,
                                 int rank) {
    ClusterView view;
    view.servers = servers;
    view.server_ports = server_ports;
    return ServerAddressFor(view, server, rank);
  }, py::arg("servers"), py::arg("server_ports"), py::arg("server"), py::arg("rank"),
     "The host:port a worker of `rank` connects to on `server`.");
  m.def("format_waiting", &FormatWaiting);
  // GPU tensors: NCCL or shared memory (device_reduce.h); (nccl, reason).
  m.def("choose_device_reduce", [](bool cuda_build, bool alone, const std::vector<int>& ranks,
                                   const std::vector<std::string>& votes,
                                   const std::vector<std::string>& gpus) {
    const DeviceReduceChoice c = ChooseDeviceReduce(cuda_build, alone, ranks, votes, gpus);
    return py::make_tuple(c.nccl, c.reason);
  });

  m.def("check_on_loop", [](bool from_another_thread) {
    LoopThread owner;  // owned by this (the calling) thread
    auto check = [&owner] { TFPS_CHECK_ON_LOOP(owner); };
    py::gil_scoped_release release;
    if (!from_another_thread) {
      check();
      return;
    }
    std::thread other(check);
    other.join();
  }, py::arg("from_another_thread"),
     "Exercises the ...OnLoop thread check (common/loop_thread.h); from another thread it "
     "aborts the process, as a misplaced engine call would.");

  m.def("rate_limit_trace", [](double interval_s, int burst, size_t max_peers,
                               const std::vector<std::pair<std::string, double>>& events) {
    PeerRateLimiter limiter(interval_s, burst, max_peers);
    const auto t0 = PeerRateLimiter::Clock::now();
    std::vector<py::tuple> out;
    for (const auto& e : events) {
      uint64_t suppressed = 0;
      const auto at = t0 + std::chrono::duration_cast<PeerRateLimiter::Clock::duration>(
                               std::chrono::duration<double>(e.second));
      const bool allowed = limiter.Allow(e.first, &suppressed, at);
      out.push_back(py::make_tuple(allowed, allowed ? suppressed : 0));
    }
    return out;
  }, py::arg("interval_s"), py::arg("burst"), py::arg("max_peers"), py::arg("events"),
     "Runs common/rate_limit.h's PeerRateLimiter over (peer, seconds) events: "
     "[(allowed, suppressed before it)].");
  m.def("escape_for_log", [](const py::bytes& text, size_t max_bytes) {
    return EscapeForLog(std::string(text), max_bytes);
  }, py::arg("text"), py::arg("max_bytes") = 64);
  m.def("config_table", [] {
    std::vector<py::tuple> out;
    for (const ConfigEntry& e : ConfigTable()) {
      out.push_back(py::make_tuple(e.name, e.type, e.default_value, e.doc));
    }
    return out;
  });

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

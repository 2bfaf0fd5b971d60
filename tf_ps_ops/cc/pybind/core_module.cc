// tf_ps_ops._core: the C++ core exposed to tests and tools without TensorFlow — the wire
// format, the rendezvous messages, partitioning, the config table, and a blocking client of
// the engine (engine_bindings.cc). Server internals have their own binding
// (ps_server/testing/server_module.cc).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <thread>

#include "tf_ps_ops/cc/cluster/messages.h"
#include "tf_ps_ops/cc/common/config.h"
#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/common/loop_thread.h"
#include "tf_ps_ops/cc/common/rate_limit.h"
#include "tf_ps_ops/cc/engine/local/device_reduce.h"
#include "tf_ps_ops/cc/engine/partition.h"
#include "tf_ps_ops/cc/pybind/codec_bindings.h"
#include "tf_ps_ops/cc/pybind/engine_bindings.h"
#include "tf_ps_ops/cc/pybind/py_convert.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace py = pybind11;

namespace tfps {
namespace {

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
  BindEngine(m);
}

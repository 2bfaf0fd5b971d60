// tf_ps_ops._core: the C++ core exposed to tests and tools without TensorFlow — the wire
// format, partitioning, summation, the config table, and a blocking client of the engine.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <future>

#include "ps_server/reduce.h"
#include "tf_ps_ops/cc/common/config.h"
#include "tf_ps_ops/cc/engine/engine.h"
#include "tf_ps_ops/cc/engine/partition.h"
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
  const char kind = dt.kind();
  const size_t size = dt.itemsize();
  if (kind == 'f' && size == 2) return DType::kFloat16;
  if (kind == 'f' && size == 4) return DType::kFloat32;
  if (kind == 'f' && size == 8) return DType::kFloat64;
  if (kind == 'i' && size == 1) return DType::kInt8;
  if (kind == 'u' && size == 1) return DType::kUInt8;
  if (kind == 'i' && size == 4) return DType::kInt32;
  if (kind == 'i' && size == 8) return DType::kInt64;
  throw std::invalid_argument("unsupported dtype " + std::string(py::str(dt)));
}

py::bytes EncodeHeadPy(const py::dict& fields, const std::vector<int64_t>& dims) {
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
  h.status = static_cast<uint32_t>(get("status", 0));
  h.count = get("count", 0);
  h.total_count = get("total_count", 0);
  head.dims = dims;
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
  d["count"] = h.count;
  d["total_count"] = h.total_count;
  d["dims"] = head.dims;
  return py::make_tuple(py::none(), d);
}

py::array PushPullPy(const std::string& name, py::array input, int root_rank) {
  py::array in = py::array::ensure(input, py::array::c_style);
  const DType dtype = WireDTypeOf(in.dtype());
  py::array out(in.dtype(), std::vector<py::ssize_t>(in.shape(), in.shape() + in.ndim()));
  PushPullRequest request;
  request.name = name;
  request.dtype = dtype;
  for (py::ssize_t i = 0; i < in.ndim(); ++i) request.dims.push_back(in.shape(i));
  request.count = static_cast<uint64_t>(in.size());
  request.input = in.data();
  request.output = out.mutable_data();
  request.root_rank = root_rank;
  // `in` and `out` stay referenced by this frame until the wait below returns; the holder
  // only has to outlive ZeroMQ's use of the input, which ends before the reply arrives.
  request.input_holder = std::make_shared<int>(0);
  std::promise<Status> promise;
  request.done = [&promise](const Status& s) { promise.set_value(s); };
  Status status;
  {
    py::gil_scoped_release release;
    Engine::Get().Enqueue(std::move(request));
    status = promise.get_future().get();
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
  request.input = in.data();
  request.input_holder = std::make_shared<int>(0);  // `in` outlives the wait below
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
}  // namespace tfps

PYBIND11_MODULE(_core, m) {
  using namespace tfps;
  m.doc() = "tf_ps_ops C++ core, for tests and tools (no TensorFlow).";
  m.attr("MAGIC") = kMagic;
  m.attr("PROTOCOL_VERSION") = kProtocolVersion;
  m.attr("HEADER_BYTES") = sizeof(Header);
  py::dict types;
  types["REGISTER"] = static_cast<int>(MsgType::kRegister);
  types["REGISTER_REPLY"] = static_cast<int>(MsgType::kRegisterReply);
  types["HELLO"] = static_cast<int>(MsgType::kHello);
  types["HELLO_REPLY"] = static_cast<int>(MsgType::kHelloReply);
  types["PUSH_PULL"] = static_cast<int>(MsgType::kPushPull);
  types["PUSH_PULL_REPLY"] = static_cast<int>(MsgType::kPushPullReply);
  types["ERROR"] = static_cast<int>(MsgType::kError);
  types["BYE"] = static_cast<int>(MsgType::kBye);
  m.attr("MSG_TYPES") = types;
  m.attr("FLAG_NO_DATA") = kFlagNoData;

  m.def("encode_head", &EncodeHeadPy, py::arg("fields"), py::arg("dims") = std::vector<int64_t>());
  m.def("decode_head", &DecodeHeadPy, py::arg("frame"), py::arg("payload_size"),
        "Returns (error or None, fields dict or None).");
  m.def("wire_dtype", [](const py::dtype& dt) { return static_cast<int>(WireDTypeOf(dt)); });
  m.def("key_of_name", &KeyOfName);
  m.def("server_of_partition", &ServerOfPartition);
  m.def("partition_tensor",
        [](uint64_t key, uint64_t total, size_t elem, int64_t part_bytes, int servers) {
          std::vector<py::tuple> out;
          for (const Partition& p : PartitionTensor(key, total, elem, part_bytes, servers)) {
            out.push_back(py::make_tuple(p.index, p.offset, p.count, p.server));
          }
          return out;
        });
  m.def("sum_into", [](py::array dst, py::array src) {
    if (dst.dtype().kind() != src.dtype().kind() || dst.size() != src.size() ||
        !(dst.flags() & py::array::c_style) || !(src.flags() & py::array::c_style)) {
      throw std::invalid_argument("sum_into needs two C-contiguous arrays of one dtype and size");
    }
    SumInto(WireDTypeOf(dst.dtype()), dst.mutable_data(), src.data(), dst.size());
  });
  m.def("half_to_float", &HalfToFloat);
  m.def("float_to_half", &FloatToHalf);
  m.def("bfloat16_to_float", &BFloat16ToFloat);
  m.def("float_to_bfloat16", &FloatToBFloat16);
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
  m.def("push_pull", &PushPullPy, py::arg("name"), py::arg("array"), py::arg("root_rank") = -1,
        "Blocking push_pull of a NumPy array; returns the sum (or root's array).");
  m.def("allgather", &AllgatherPy, py::arg("name"), py::arg("array"),
        "Blocking peer-to-peer allgather; returns every worker's array in rank order.");
  m.def("stats", [] {
    EngineStats s = Engine::Get().stats();
    py::dict d;
    d["bytes_sent"] = s.bytes_sent;
    d["bytes_received"] = s.bytes_received;
    d["messages_sent"] = s.messages_sent;
    d["peer_bytes_sent"] = s.peer_bytes_sent;
    return d;
  });
}

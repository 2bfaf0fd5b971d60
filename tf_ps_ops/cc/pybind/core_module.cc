// tf_ps_ops._core: the C++ core exposed to tests and tools without TensorFlow — the wire
// format, partitioning, summation, the config table, and a blocking client of the engine.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <future>

#include "ps_server/checkpoint.h"
#include "ps_server/key_store.h"
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
  h.status = static_cast<uint32_t>(get("status", 0));
  h.count = get("count", 0);
  h.total_count = get("total_count", 0);
  h.optimizer = static_cast<uint8_t>(get("optimizer", 0));
  head.dims = dims;
  head.params = params;
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

// Blocking push_pull of arrays enqueued together (one engine wake-up, like a grouped
// allreduce: small ones share messages, TFPS_FUSION_BYTES); returns the sums (or, with
// root_rank >= 0, root's arrays).
std::vector<py::array> PushPullArrays(const std::vector<std::string>& names,
                                      const std::vector<py::array>& inputs, int root_rank) {
  if (names.size() != inputs.size()) throw std::invalid_argument("one name per array");
  std::vector<py::array> ins, outs;
  std::vector<PushPullRequest> requests(names.size());
  std::vector<std::promise<Status>> promises(names.size());
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
    // `ins` and `outs` stay referenced until the waits below return; the holder only has
    // to outlive ZeroMQ's use of the input, which ends before the reply arrives.
    request.input_holder = std::make_shared<int>(0);
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
  }
  ThrowIfError(status);
  return outs;
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

// Checkpoint files as Python dicts: {"server_id", "num_servers", "thread", "num_threads",
// "params": [{"key", "partition", "dtype" (wire code), "count", "optimizer" (code),
// "updates", "value": bytes, "slots": [bytes]}]} in (key, partition) order.
py::list ParamsToPy(const ShardParams& params) {
  py::list out;
  for (const auto& entry : params) {
    const ShardParam& p = entry.second;
    py::dict d;
    d["key"] = entry.first.first;
    d["partition"] = entry.first.second;
    d["dtype"] = static_cast<int>(p.dtype);
    d["count"] = p.count;
    d["optimizer"] = static_cast<int>(p.optimizer);
    d["updates"] = p.updates;
    d["value"] = py::bytes(p.value.data(), p.value.size());
    py::list slots;
    for (const auto& slot : p.slots) slots.append(py::bytes(slot.data(), slot.size()));
    d["slots"] = slots;
    out.append(d);
  }
  return out;
}

std::vector<char> BytesOf(const py::handle& h) {
  const std::string s = h.cast<std::string>();
  return std::vector<char>(s.begin(), s.end());
}

ShardParams ParamsFromPy(const py::list& list) {
  ShardParams params;
  for (const py::handle& item : list) {
    const py::dict d = item.cast<py::dict>();
    ShardParam p;
    p.dtype = static_cast<DType>(d["dtype"].cast<int>());
    p.count = d["count"].cast<uint64_t>();
    p.optimizer = static_cast<Optimizer>(d["optimizer"].cast<int>());
    p.updates = d["updates"].cast<uint64_t>();
    p.value = BytesOf(d["value"]);
    for (const py::handle& slot : d["slots"].cast<py::list>()) p.slots.push_back(BytesOf(slot));
    params[ParamId(d["key"].cast<uint64_t>(), d["partition"].cast<uint32_t>())] = std::move(p);
  }
  return params;
}

py::dict ReadCheckpointPy(const std::string& path) {
  ShardInfo info;
  ShardParams params;
  ThrowIfError(ReadCheckpoint(path, &info, &params));
  py::dict d;
  d["server_id"] = info.server_id;
  d["num_servers"] = info.num_servers;
  d["thread"] = info.thread;
  d["num_threads"] = info.num_threads;
  d["params"] = ParamsToPy(params);
  return d;
}

void WriteCheckpointPy(const std::string& path, const py::dict& d) {
  ShardInfo info;
  info.server_id = d["server_id"].cast<int>();
  info.num_servers = d["num_servers"].cast<int>();
  info.thread = d["thread"].cast<int>();
  info.num_threads = d["num_threads"].cast<int>();
  ThrowIfError(WriteCheckpoint(path, info, ParamsFromPy(d["params"].cast<py::list>())));
}

// A KeyStore of one worker, driven push by push: PS-mode rounds without a network.
class KeyStoreDriver {
 public:
  KeyStoreDriver() : store_(1, 0, 60.0) {}

  // A PS init push (kFlagPsInit, with kFlagPsOverwrite if `overwrite`); the value answered.
  py::bytes Init(uint64_t key, uint32_t partition, py::array value, bool overwrite) {
    return Push(key, partition, value, kFlagPsInit | (overwrite ? kFlagPsOverwrite : 0),
                Optimizer::kNone, {});
  }
  // A PS apply push with `optimizer` (code) and its hyperparameters + slot initial values.
  py::bytes Apply(uint64_t key, uint32_t partition, py::array grad, int optimizer,
                  const std::vector<double>& params) {
    return Push(key, partition, grad, kFlagPsApply, static_cast<Optimizer>(optimizer), params);
  }
  KeyStore& store() { return store_; }

 private:
  py::bytes Push(uint64_t key, uint32_t partition, py::array data, uint32_t flags,
                 Optimizer optimizer, const std::vector<double>& params) {
    py::array in = py::array::ensure(data, py::array::c_style);
    Head head;
    Header& h = head.header;
    h.type = static_cast<uint16_t>(MsgType::kPushPull);
    h.key = key;
    h.partition = partition;
    h.num_partitions = partition + 1;
    h.step = ++steps_[ParamId(key, partition)];
    h.dtype = static_cast<uint8_t>(WireDTypeOf(in.dtype()));
    h.optimizer = static_cast<uint8_t>(optimizer);
    h.flags = flags;
    h.sender = 0;
    h.count = h.total_count = static_cast<uint64_t>(in.size());
    head.dims = {static_cast<int64_t>(in.size())};
    head.params = params;
    std::vector<Outgoing> out;
    store_.OnPush(head, zmq::message_t(in.data(), in.nbytes()), &out);
    if (out.size() != 1) throw std::runtime_error("expected one reply");
    Head reply;
    const std::string& frame = out[0].head;
    ThrowIfError(DecodeHead(frame.data(), frame.size(), out[0].payload.size(), &reply));
    if (reply.header.type == static_cast<uint16_t>(MsgType::kError)) {
      throw std::runtime_error(out[0].payload.to_string());
    }
    return py::bytes(static_cast<const char*>(out[0].payload.data()), out[0].payload.size());
  }

  KeyStore store_;
  std::map<ParamId, uint64_t> steps_;
};

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
  m.attr("FLAG_SPARSE") = kFlagSparse;
  m.attr("FLAG_TIMED") = kFlagTimed;
  m.attr("FLAG_ACK") = kFlagAck;
  m.attr("MAX_BATCH") = kMaxBatch;
  m.attr("CHECKPOINT_VERSION") = kCheckpointVersion;

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
  m.def("crc32", [](const py::bytes& data, uint32_t crc) {
    const std::string s = data;
    return Crc32(crc, s.data(), s.size());
  }, py::arg("data"), py::arg("crc") = 0);
  m.def("checkpoint_file_name", &CheckpointFileName);
  m.def("read_checkpoint", &ReadCheckpointPy, "Reads and validates one checkpoint file.");
  m.def("write_checkpoint", &WriteCheckpointPy, "Writes one checkpoint file atomically.");
  m.def("load_shard", [](const std::string& dir, int server_id, int num_servers, int threads) {
    std::vector<std::pair<int, int>> existing;
    ThrowIfError(ListCheckpoints(dir, &existing));
    ShardInfo want;
    want.server_id = server_id;
    want.num_servers = num_servers;
    want.num_threads = threads;
    std::vector<ShardParams> per_thread;
    ThrowIfError(LoadShard(dir, existing, want, &per_thread));
    py::list out;
    for (const ShardParams& params : per_thread) out.append(ParamsToPy(params));
    return out;
  }, "A server's files, per thread, as ps_server loads them at start ([] when none).");
  py::class_<KeyStoreDriver>(m, "KeyStore", "A server thread's store of one worker, for tests.")
      .def(py::init<>())
      .def("init", &KeyStoreDriver::Init, py::arg("key"), py::arg("partition"),
           py::arg("value"), py::arg("overwrite") = false)
      .def("apply", &KeyStoreDriver::Apply, py::arg("key"), py::arg("partition"),
           py::arg("grad"), py::arg("optimizer"), py::arg("params"))
      .def("params", [](KeyStoreDriver& d) { return ParamsToPy(d.store().params()); })
      .def("restore", [](KeyStoreDriver& d, const py::list& params) {
        d.store().RestoreParams(ParamsFromPy(params));
      })
      .def("checkpoint_due", [](KeyStoreDriver& d, uint64_t every) {
        return d.store().CheckpointDue(every);
      })
      .def("mark_checkpointed", [](KeyStoreDriver& d) { d.store().MarkCheckpointed(); });

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
  m.def("push_pull", [](const std::string& name, py::array array, int root_rank) {
    return PushPullArrays({name}, {array}, root_rank)[0];
  }, py::arg("name"), py::arg("array"), py::arg("root_rank") = -1,
        "Blocking push_pull of a NumPy array; returns the sum (or root's array).");
  m.def("push_pull_group", [](const std::vector<std::string>& names,
                              const std::vector<py::array>& arrays) {
    return PushPullArrays(names, arrays, -1);
  }, py::arg("names"), py::arg("arrays"),
        "Blocking push_pull of several arrays started together; returns the sums.");
  m.def("allgather", &AllgatherPy, py::arg("name"), py::arg("array"),
        "Blocking peer-to-peer allgather; returns every worker's array in rank order.");
  m.def("stats", [] {
    EngineStats s = Engine::Get().stats();
    py::dict d;
    d["bytes_sent"] = s.bytes_sent;
    d["bytes_received"] = s.bytes_received;
    d["messages_sent"] = s.messages_sent;
    d["peer_bytes_sent"] = s.peer_bytes_sent;
    d["parts_sent"] = s.parts_sent;
    d["batches_sent"] = s.batches_sent;
    d["batches_received"] = s.batches_received;
    return d;
  });
}

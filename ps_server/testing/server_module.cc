// _ps_server_testing: the parameter server's internals exposed to tests, without a
// network or TensorFlow — summation, fp16/bf16 conversion, the checkpoint format, the
// thread-shard rule and a KeyStore driven push by push. Built in place next to this file and
// never packaged (tools/native_build.py); the core's own binding (_core) binds no server code.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "ps_server/checkpoint.h"
#include "ps_server/key_store.h"
#include "ps_server/testing/rounds_driver.h"
#include "ps_server/testing/stale_driver.h"
#include "ps_server/reduce.h"
#include "ps_server/sum_rounds.h"
#include "ps_server/thread_shard.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace py = pybind11;

namespace tfps {
namespace {

void ThrowIfError(const Status& s) {
  if (!s.ok()) throw std::runtime_error(s.ToString());  // tests match the code's name
}

DType WireDTypeOf(const py::dtype& dt) {
  const DType dtype = DTypeOfElement(dt.kind(), dt.itemsize());
  if (dtype == DType::kInvalid) {
    throw std::invalid_argument("unsupported dtype " + std::string(py::str(dt)));
  }
  return dtype;
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
  KeyStoreDriver() : store_(1, 0, StallPolicy{}) {}

  // A PS init push (kFlagPsInit, with kFlagPsOverwrite if `overwrite`); the value answered.
  py::bytes Init(uint64_t key, uint32_t partition, py::array value, bool overwrite) {
    return Push(key, partition, value, kFlagPsInit | (overwrite ? kFlagPsOverwrite : 0),
                Optimizer::kNone, {});
  }
  // A PS slot push (kFlagPsInit | kFlagPsSlot, params {k}; a write if `write`); the answer.
  py::bytes Slot(uint64_t key, uint32_t partition, py::array value, int k, bool write) {
    return Push(key, partition, value,
                kFlagPsInit | kFlagPsSlot | (write ? kFlagPsOverwrite : 0), Optimizer::kNone,
                {static_cast<double>(k)});
  }
  // A PS apply push with `optimizer` (code) and its hyperparameters + slot initial values.
  py::bytes Apply(uint64_t key, uint32_t partition, py::array grad, int optimizer,
                  const std::vector<double>& params) {
    return Push(key, partition, grad, kFlagPsApply, static_cast<Optimizer>(optimizer), params);
  }
  // A summation push whose payload is `encoded` (codec id `codec`) standing for `n` float32
  // elements; the encoded sum answered.
  py::bytes PushEncoded(uint64_t key, uint32_t partition, py::bytes encoded, uint64_t n,
                        int codec, bool no_feedback) {
    const std::string bytes = encoded;
    py::array_t<uint8_t> data(static_cast<py::ssize_t>(bytes.size()));
    std::copy(bytes.begin(), bytes.end(), data.mutable_data());
    return Push(key, partition, data, no_feedback ? kFlagNoFeedback : 0, Optimizer::kNone, {},
                static_cast<uint8_t>(codec), n);
  }
  KeyStore& store() { return store_; }

 private:
  py::bytes Push(uint64_t key, uint32_t partition, py::array data, uint32_t flags,
                 Optimizer optimizer, const std::vector<double>& params, uint8_t codec = 0,
                 uint64_t encoded_count = 0) {
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
    if (codec != 0) {  // the payload is an encoding of float32 elements
      h.codec = codec;
      h.dtype = static_cast<uint8_t>(DType::kFloat32);
      h.count = h.total_count = encoded_count;
    }
    head.dims = {static_cast<int64_t>(h.count)};
    if (codec != 0) {  // checked as the I/O thread checks a push before handing it over
      const std::string frame = EncodeHead(head);
      ThrowIfError(DecodeHead(frame.data(), frame.size(), in.nbytes(), &head));
    }
    head.params = params;
    if ((flags & kFlagPsSlot) != 0) {  // checked as the I/O thread checks a push
      const std::string frame = EncodeHead(head);
      ThrowIfError(DecodeHead(frame.data(), frame.size(), in.nbytes(), &head));
    }
    std::vector<Outgoing> out;
    store_.OnPush(head, Buffer::CopyOf(in.data(), in.nbytes()), &out);
    if (out.size() != 1) throw std::runtime_error("expected one reply");
    Head reply;
    const std::string& frame = out[0].head;
    ThrowIfError(DecodeHead(frame.data(), frame.size(), out[0].payload.size(), &reply));
    if (reply.header.type == static_cast<uint16_t>(MsgType::kError)) {
      throw std::runtime_error(out[0].payload.ToString());
    }
    return py::bytes(out[0].payload.data(), out[0].payload.size());
  }

  KeyStore store_;
  std::map<ParamId, uint64_t> steps_;
};

}  // namespace
}  // namespace tfps

PYBIND11_MODULE(_ps_server_testing, m) {
  using namespace tfps;
  m.doc() = "ps_server internals, for tests (not packaged).";
  BindStaleDriver(m);
  BindRoundsDriver(m);
  m.attr("CHECKPOINT_VERSION") = kCheckpointVersion;
  m.def("sum_into", [](py::array dst, py::array src) {
    if (dst.dtype().kind() != src.dtype().kind() || dst.size() != src.size() ||
        !(dst.flags() & py::array::c_style) || !(src.flags() & py::array::c_style)) {
      throw std::invalid_argument("sum_into needs two C-contiguous arrays of one dtype and size");
    }
    SumInto(WireDTypeOf(dst.dtype()), dst.mutable_data(), src.data(), dst.size());
  });
  m.def("reduce_into", [](py::array dst, py::array src, int op) {
    if (dst.dtype().kind() != src.dtype().kind() || dst.size() != src.size() ||
        !(dst.flags() & py::array::c_style) || !(src.flags() & py::array::c_style) ||
        op < 0 || op > kMaxReduceOp) {
      throw std::invalid_argument("reduce_into needs two C-contiguous arrays of one dtype and "
                                  "size and a reduce op 0..3");
    }
    ReduceInto(static_cast<ReduceOp>(op), WireDTypeOf(dst.dtype()), dst.mutable_data(),
               src.data(), dst.size());
  }, "dst = op(dst, src) elementwise; op: 0 sum, 1 min, 2 max, 3 product (ReduceOp).");
  m.def("sum_round", [](const std::vector<py::array>& pushes, const std::vector<bool>& borrowed,
                        int op) {
    if (pushes.empty() || pushes.size() != borrowed.size() || op < 0 || op > kMaxReduceOp) {
      throw std::invalid_argument("sum_round needs one borrowed flag per push and an op 0..3");
    }
    SumRounds rounds(static_cast<int>(pushes.size()), 0, StallPolicy{});
    Round complete;
    bool done = false;
    std::vector<Outgoing> out;
    for (size_t i = 0; i < pushes.size(); ++i) {
      const py::array& in = pushes[i];
      if (!(in.flags() & py::array::c_style)) throw std::invalid_argument("C-contiguous only");
      Head head;
      Header& h = head.header;
      h.type = static_cast<uint16_t>(MsgType::kPushPull);
      h.step = 1;
      h.num_partitions = 1;
      h.dtype = static_cast<uint8_t>(WireDTypeOf(in.dtype()));
      h.reduce_op = static_cast<uint8_t>(op);
      h.sender = static_cast<int32_t>(i);
      h.count = h.total_count = static_cast<uint64_t>(in.size());
      head.dims = {static_cast<int64_t>(h.count)};
      // Borrowed: the array's own memory, as a colocated worker's segment (TFPS_SHM_SERVER).
      Buffer payload = borrowed[i] ? Buffer::Borrow(in.data(), in.nbytes(), nullptr)
                                   : Buffer::CopyOf(in.data(), in.nbytes());
      done = rounds.Add(head, std::move(payload), 0, &out, &complete);
    }
    if (!done || !out.empty()) throw std::runtime_error("the round did not complete");
    return py::make_tuple(py::bytes(complete.sum.data(), complete.sum.size()),
                          complete.sum.borrowed());
  }, "One summation round of len(pushes) workers, pushes in list order, some borrowed "
     "(read in place, never written); returns (the sum's bytes, whether it is still borrowed).");
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
      .def("slot", &KeyStoreDriver::Slot, py::arg("key"), py::arg("partition"),
           py::arg("value"), py::arg("k"), py::arg("write") = false)
      .def("apply", &KeyStoreDriver::Apply, py::arg("key"), py::arg("partition"),
           py::arg("grad"), py::arg("optimizer"), py::arg("params"))
      .def("push_encoded", &KeyStoreDriver::PushEncoded, py::arg("key"), py::arg("partition"),
           py::arg("encoded"), py::arg("n"), py::arg("codec"), py::arg("no_feedback") = false)
      .def("params", [](KeyStoreDriver& d) { return ParamsToPy(d.store().params()); })
      .def("restore", [](KeyStoreDriver& d, const py::list& params) {
        d.store().RestoreParams(ParamsFromPy(params));
      })
      .def("checkpoint_due", [](KeyStoreDriver& d, uint64_t every) {
        return d.store().CheckpointDue(every);
      })
      .def("mark_checkpointed", [](KeyStoreDriver& d) { d.store().MarkCheckpointed(); });

  m.def("thread_of_partition", &ThreadOfPartition, py::arg("key"), py::arg("partition"),
        py::arg("num_threads"), "The summation thread that owns a parameter partition.");
}

#include "ps_server/testing/stale_driver.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <stdexcept>

#include "ps_server/key_store.h"

namespace py = pybind11;

namespace tfps {
namespace {

// A float32 summation push of worker `rank` for `step` of (key, partition): the header
// fields every Push* below starts from.
Head PushHead(int rank, uint64_t key, uint32_t partition, uint64_t step) {
  Head head;
  Header& h = head.header;
  h.type = static_cast<uint16_t>(MsgType::kPushPull);
  h.key = key;
  h.partition = partition;
  h.num_partitions = partition + 1;
  h.step = step;
  h.dtype = static_cast<uint8_t>(DType::kFloat32);
  h.sender = rank;
  return head;
}

class StaleDriver {
 public:
  StaleDriver(int num_workers, const std::string& consistency, double stall_shutdown_s,
              double stall_warning_s)
      : num_workers_(num_workers) {
    Consistency c;
    Status s = ParseConsistency("consistency", consistency, &c);
    if (!s.ok()) throw std::invalid_argument(s.message());
    store_ = std::make_unique<KeyStore>(num_workers, 0,
                                        StallPolicy{stall_warning_s, stall_shutdown_s}, c);
  }

  // Worker `rank` pushes float32 `values` for `step` of (key, partition); `ps`: a PS-mode
  // SGD update (lr `lr`) instead of a summation push, `broadcast`: a broadcast's push.
  // Returns every answer that left: [(rank, step, array or error text)].
  py::list Push(int rank, uint64_t key, uint32_t partition, uint64_t step,
                py::array_t<float, py::array::c_style | py::array::forcecast> values,
                bool ps, double lr, bool broadcast) {
    if (rank < 0 || rank >= num_workers_) throw std::invalid_argument("bad rank");
    Head head = PushHead(rank, key, partition, step);
    Header& h = head.header;
    h.count = h.total_count = static_cast<uint64_t>(values.size());
    if (ps) {
      h.flags = kFlagPsApply;
      h.optimizer = static_cast<uint8_t>(Optimizer::kGradientDescent);
      head.params = {lr};
    }
    if (broadcast) h.flags |= kFlagBroadcast;
    head.dims = {static_cast<int64_t>(h.count)};
    std::vector<Outgoing> out;
    store_->OnPush(head, Buffer::CopyOf(values.data(), values.nbytes()), &out);
    return Replies(out);
  }

  // Worker `rank` pushes `encoded` (codec id `codec`), standing for `n` float32 elements,
  // to the summation round of `step` (`reduce_op`: a ReduceOp code); checked as the I/O
  // thread checks a push. An answer's payload is the encoded sum (bytes).
  py::list PushEncoded(int rank, uint64_t key, uint32_t partition, uint64_t step,
                       py::bytes encoded, uint64_t n, int codec, bool no_feedback,
                       int reduce_op) {
    if (rank < 0 || rank >= num_workers_) throw std::invalid_argument("bad rank");
    const std::string bytes = encoded;
    Head head = PushHead(rank, key, partition, step);
    Header& h = head.header;
    h.codec = static_cast<uint8_t>(codec);
    h.reduce_op = static_cast<uint8_t>(reduce_op);
    h.flags = no_feedback ? kFlagNoFeedback : 0;
    h.count = h.total_count = n;
    head.dims = {static_cast<int64_t>(n)};
    const std::string frame = EncodeHead(head);
    const Status s = DecodeHead(frame.data(), frame.size(), bytes.size(), &head);
    if (!s.ok()) throw std::runtime_error(s.message());
    std::vector<Outgoing> out;
    store_->OnPush(head, Buffer::CopyOf(bytes.data(), bytes.size()), &out);
    return Replies(out);
  }

  // A sparse PS-mode SGD update of `ids` (strictly increasing) of a [total_rows, row]
  // parameter with `rows` ([len(ids), row]). The answers' payloads are [int64 ids][rows].
  py::list PushSparse(int rank, uint64_t key, uint64_t step, int64_t total_rows,
                      py::array_t<int64_t, py::array::c_style | py::array::forcecast> ids,
                      py::array_t<float, py::array::c_style | py::array::forcecast> rows,
                      double lr) {
    Head head = PushHead(rank, key, 0, step);
    Header& h = head.header;
    h.flags = kFlagPsApply | kFlagSparse;
    h.optimizer = static_cast<uint8_t>(Optimizer::kGradientDescent);
    h.count = static_cast<uint64_t>(ids.size());
    const int64_t row = ids.size() == 0 ? 1 : rows.size() / ids.size();
    h.total_count = static_cast<uint64_t>(total_rows * row);
    head.dims = {total_rows, row};
    head.params = {lr};
    Buffer payload = Buffer::Allocate(ids.nbytes() + rows.nbytes());
    std::memcpy(payload.data(), ids.data(), ids.nbytes());
    std::memcpy(payload.data() + ids.nbytes(), rows.data(), rows.nbytes());
    std::vector<Outgoing> out;
    store_->OnPush(head, std::move(payload), &out);
    return Replies(out);
  }

  // A PS-mode parameter, as an init push by every worker (bsp) would set it.
  py::list Init(uint64_t key, uint32_t partition,
                py::array_t<float, py::array::c_style | py::array::forcecast> values) {
    py::list all;
    for (int rank = 0; rank < num_workers_; ++rank) {
      Head head = PushHead(rank, key, partition, 1);
      Header& h = head.header;
      h.flags = kFlagPsInit | kFlagBroadcast | (rank == 0 ? 0 : kFlagNoData);
      h.count = h.total_count = static_cast<uint64_t>(values.size());
      head.dims = {static_cast<int64_t>(h.count)};
      std::vector<Outgoing> out;
      store_->OnPush(head, rank == 0 ? Buffer::CopyOf(values.data(), values.nbytes()) : Buffer(),
                     &out);
      for (auto item : Replies(out)) all.append(item);
    }
    return all;
  }

  py::list Lose(int rank) {
    std::vector<Outgoing> out;
    store_->OnWorkerLost(rank, "killed by the test", &out);
    return Replies(out);
  }

  py::list Tick(double seconds_later) {
    std::vector<Outgoing> out;
    store_->OnTick(KeyStore::Clock::now() +
                       std::chrono::duration_cast<KeyStore::Clock::duration>(
                           std::chrono::duration<double>(seconds_later)),
                   &out);
    return Replies(out);
  }

 private:
  py::list Replies(const std::vector<Outgoing>& out) const {
    py::list replies;
    for (const Outgoing& o : out) {
      Head reply;
      const Status s = DecodeHead(o.head.data(), o.head.size(), o.payload.size(), &reply);
      if (!s.ok()) throw std::runtime_error("a reply does not decode: " + s.message());
      const int rank = std::stoi(o.identity.substr(o.identity.find_first_of("0123456789")));
      if (reply.header.type == static_cast<uint16_t>(MsgType::kError)) {
        replies.append(py::make_tuple(rank, reply.header.step, o.payload.ToString()));
        continue;
      }
      if (reply.header.codec != 0) {  // an encoded sum: its bytes
        replies.append(py::make_tuple(rank, reply.header.step,
                                      py::bytes(o.payload.data(), o.payload.size())));
        continue;
      }
      py::array_t<float> values(static_cast<py::ssize_t>(o.payload.size() / sizeof(float)));
      std::memcpy(values.mutable_data(), o.payload.data(), o.payload.size());
      replies.append(py::make_tuple(rank, reply.header.step, values));
    }
    return replies;
  }

  const int num_workers_;
  std::unique_ptr<KeyStore> store_;
};

}  // namespace

void BindStaleDriver(py::module_& m) {
  py::class_<StaleDriver>(m, "StaleKeyStore",
                          "A server thread's store of several workers under a consistency "
                          "model, driven push by push (tests).")
      .def(py::init<int, const std::string&, double, double>(), py::arg("num_workers"),
           py::arg("consistency"), py::arg("stall_shutdown_s") = 0.0,
           py::arg("stall_warning_s") = 60.0)
      .def("push", &StaleDriver::Push, py::arg("rank"), py::arg("key"), py::arg("partition"),
           py::arg("step"), py::arg("values"), py::arg("ps") = false, py::arg("lr") = 0.0,
           py::arg("broadcast") = false)
      .def("push_encoded", &StaleDriver::PushEncoded, py::arg("rank"), py::arg("key"),
           py::arg("partition"), py::arg("step"), py::arg("encoded"), py::arg("n"),
           py::arg("codec"), py::arg("no_feedback") = false, py::arg("reduce_op") = 0)
      .def("push_sparse", &StaleDriver::PushSparse, py::arg("rank"), py::arg("key"),
           py::arg("step"), py::arg("total_rows"), py::arg("ids"), py::arg("rows"),
           py::arg("lr"))
      .def("init", &StaleDriver::Init, py::arg("key"), py::arg("partition"), py::arg("values"))
      .def("lose", &StaleDriver::Lose, py::arg("rank"))
      .def("tick", &StaleDriver::Tick, py::arg("seconds_later"));
}

}  // namespace tfps

#include "ps_server/testing/rounds_driver.h"

#include <pybind11/stl.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "ps_server/key_store.h"
#include "tf_ps_ops/cc/common/consistency.h"

namespace py = pybind11;

namespace tfps {
namespace {

// Each call returns what the store sent: [(rank, type, step, error text or None, payload)].
class RoundsDriver {
 public:
  RoundsDriver(int num_workers, double stall_shutdown_s, double stall_warning_s)
      : store_(num_workers, 0, StallPolicy{stall_warning_s, stall_shutdown_s}, Consistency()) {}

  py::list Push(const py::bytes& head_frame, const py::bytes& payload) {
    std::vector<Outgoing> out;
    const std::string data = payload;
    Head head = Decode(head_frame, data.size());
    if (head.header.type == static_cast<uint16_t>(MsgType::kJoin)) {
      store_.OnJoin(head, true, &out);
    } else {
      store_.OnPush(head, Buffer::CopyOf(data.data(), data.size()), &out);
    }
    return Replies(out);
  }
  py::list Lose(int rank) {
    std::vector<Outgoing> out;
    store_.OnWorkerLost(rank, "killed by the test", &out);
    return Replies(out);
  }
  py::list Tick(double seconds_later) {
    std::vector<Outgoing> out;
    store_.OnTick(KeyStore::Clock::now() +
                      std::chrono::duration_cast<KeyStore::Clock::duration>(
                          std::chrono::duration<double>(seconds_later)),
                  &out, &warnings_);
    return Replies(out);
  }
  // The stall warnings the ticks gave since the last call.
  std::vector<std::string> TakeWarnings() {
    std::vector<std::string> w;
    w.swap(warnings_);
    return w;
  }

 private:
  static Head Decode(const std::string& frame, size_t payload_size) {
    Head head;
    Status s = DecodeHead(frame.data(), frame.size(), payload_size, &head);
    if (!s.ok()) throw std::invalid_argument(s.message());
    return head;
  }
  static py::list Replies(const std::vector<Outgoing>& out) {
    py::list replies;
    for (const Outgoing& o : out) {
      Head head = Decode(o.head, o.payload.size());
      const Header& h = head.header;
      const std::string payload(static_cast<const char*>(o.payload.data()), o.payload.size());
      const bool error = h.type == static_cast<uint16_t>(MsgType::kError);
      replies.append(py::make_tuple(std::stoi(o.identity.substr(1)), h.type, h.step,
                                    error ? py::object(py::str(payload)) : py::none(),
                                    py::bytes(payload)));
    }
    return replies;
  }

  KeyStore store_;
  std::vector<std::string> warnings_;
};

}  // namespace

void BindRoundsDriver(py::module_& m) {
  py::class_<RoundsDriver>(m, "RoundsKeyStore",
                           "A BSP server thread's store of several workers, fed head frames.")
      .def(py::init<int, double, double>(), py::arg("num_workers"),
           py::arg("stall_shutdown_s") = 0.0, py::arg("stall_warning_s") = 60.0)
      .def("take_warnings", &RoundsDriver::TakeWarnings)
      .def("push", &RoundsDriver::Push, py::arg("head"), py::arg("payload"),
           "A push or join (head frame, payload); returns the replies sent.")
      .def("lose", &RoundsDriver::Lose, py::arg("rank"))
      .def("tick", &RoundsDriver::Tick, py::arg("seconds_later"));
}

}  // namespace tfps

// Thin helpers over cppzmq shared by the worker engine, the server and the scheduler:
// sending a head + zero-copy payload, receiving a whole multipart message, socket options,
// connection monitoring.
#ifndef TFPS_CC_TRANSPORT_ZMQ_UTIL_H_
#define TFPS_CC_TRANSPORT_ZMQ_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "tf_ps_ops/cc/common/config.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

// A message whose payload stays in the caller's buffer: ZeroMQ reads it in place and drops
// `holder` (which keeps the buffer alive) once the bytes are on the wire.
zmq::message_t ZeroCopyMessage(const void* data, size_t size, std::shared_ptr<void> holder);

// Sends [identity?][head][payload]. An empty identity means a DEALER-side send. A ROUTER
// send (an identity) never blocks: when the peer's queue is full (kSocketHwm messages it
// has not read) the message is dropped and the result is Unavailable.
Status SendMessage(zmq::socket_t& socket, const std::string& identity, const Head& head,
                   zmq::message_t payload);
// One message, encoded and ready to go (possibly inside a batch).
struct Encoded {
  std::string head;
  zmq::message_t payload;
};
// Messages collected to leave together (fusion, TFPS_FUSION_BYTES).
struct Batch {
  std::vector<Encoded> messages;
  uint64_t bytes = 0;  // payload bytes held
  // Whether a message of `more` payload bytes may join without the batch exceeding `limit`
  // bytes or kMaxBatch messages.
  bool Fits(uint64_t more, uint64_t limit) const {
    return messages.size() < kMaxBatch && bytes + more <= limit;
  }
  void Add(Encoded message) {
    bytes += message.payload.size();
    messages.push_back(std::move(message));
  }
};
// Sends [identity?][batch head][head 1][payload 1]...[head n][payload n] (wire/message.h);
// a single message goes alone, without the batch head. Empties `batch`.
Status SendBatch(zmq::socket_t& socket, const std::string& identity, int sender, Batch* batch);

Status SendText(zmq::socket_t& socket, const std::string& identity, const Header& header,
                const std::string& text);

// zmq::poll that treats a signal (EINTR) as "nothing happened", so callers re-check
// their stop flag instead of dying on an uncaught zmq::error_t.
int Poll(zmq::pollitem_t* items, size_t count, int timeout_ms);

// Receives every frame of one multipart message without blocking; false if none is waiting.
bool RecvFrames(zmq::socket_t& socket, std::vector<zmq::message_t>* frames);

// Messages queued per peer to send before a socket pushes back (a DEALER's send waits, a
// ROUTER's send fails and the message is dropped): far above what a worker keeps in flight
// (a 50 GB model in 512 KiB partitions), but a bound on what a peer that never reads can
// pile up.
constexpr int kSocketHwm = 100000;

// Messages received from one peer and not yet taken by the socket's owner before ZeroMQ
// stops reading that connection. Pushing back on a receive loses nothing (the sender's
// queue and TCP hold the rest), so this is ZeroMQ's default rather than kSocketHwm: a peer
// that floods a role faster than it can answer parks 1,000 messages there, not 100,000
// (which at 100-byte heads was 30-50 MB of a server's memory).
constexpr int kSocketRcvHwm = 1000;

// How long closing a socket waits to deliver what it still holds (ZMQ_LINGER).
constexpr int kSocketLingerMs = 2000;

// Options every TCP socket of every role gets, the one place they are set: heartbeats
// (TFPS_HEARTBEAT_TIMEOUT) so a vanished host is noticed, linger so a goodbye is delivered
// on close but never blocks exit for long, high-water marks (kSocketHwm, kSocketRcvHwm), and
// ZMQ_MAXMSGSIZE (TFPS_MAX_MESSAGE_BYTES): a peer that announces a larger frame is
// disconnected before the frame is buffered; and, with a job key (TFPS_AUTH_KEY_FILE),
// CURVE (transport/auth.h): server side on a ROUTER, client side on a DEALER.
void SetCommonOptions(zmq::socket_t& socket, const Config& config);

// Pins `socket`'s connections to I/O thread `index` mod TFPS_IO_THREADS (ZMQ_AFFINITY; set
// before connect). ZeroMQ would pick the least-loaded thread itself, but a thread's load
// counts only the connections it has registered already, so sockets connected one after
// the other, as a worker connects to its servers and peers, all land on the first thread.
void PinToIoThread(zmq::socket_t& socket, int index, const Config& config);

// Connection events of `socket`, read from an inproc PAIR socket.
class Monitor {
 public:
  Monitor(zmq::context_t& context, zmq::socket_t& socket, const std::string& name, int events);
  zmq::socket_t& socket() { return pair_; }
  // Reads one event if one is waiting.
  bool Read(int* event, int* value, std::string* address);

 private:
  zmq::socket_t pair_;
};

// "tcp://host:port"; an IPv6 literal host (bare or in brackets) goes in brackets:
// "tcp://[::1]:7000".
std::string TcpAddress(const std::string& host, int port);
// The same from "host:port" (the port follows the last colon: "::1:7000" is [::1]:7000).
std::string TcpAddressOf(const std::string& host_port);
// "[::1]" -> "::1"; anything else as it is.
std::string StripBrackets(const std::string& host);
// bind() / connect() to a "tcp://..." endpoint, with ZMQ_IPV6 on exactly when its host is
// an IPv6 literal: an IPv4 or named endpoint behaves as before (a name such as localhost
// keeps resolving to IPv4 only).
void BindTcp(zmq::socket_t& socket, const std::string& endpoint);
void ConnectTcp(zmq::socket_t& socket, const std::string& endpoint);
// The port a socket bound to "tcp://*:0" got.
int BoundPort(zmq::socket_t& socket);
// The peer's IP address of a received message (ZeroMQ's "Peer-Address" property).
std::string PeerAddress(zmq::message_t& message);

}  // namespace tfps

#endif  // TFPS_CC_TRANSPORT_ZMQ_UTIL_H_

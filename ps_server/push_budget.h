// The bytes a server holds for its workers (TFPS_SERVER_PUSH_BYTES), both ways: pushes
// not answered yet, and replies not yet taken by their worker's connection.
//
// A push counts from the moment the I/O thread accepts it until its last reference dies,
// wherever it is then: queued for a summation thread, the accumulator of a round that waits
// for the other workers, a kept push of a stale round, or the sum on its way out. It counts
// what it makes the server allocate, not only what it carried: the larger of its payload
// and the reply it stands for (count x element size; a push "without data" of 2^26 float32
// carries nothing and stands for a 256 MiB reply), so the check happens before the reply
// exists. A reply counts against the worker it goes to, from the moment its summation
// thread makes it (while the push that made it still counts) until ZeroMQ has written it
// to the connection or dropped it: a worker that never reads its replies holds them
// against its own share. So a peer that pushes many distinct keys or steps and never
// completes them, or never reads (a hostile one, or one far ahead of the others), cannot
// grow the server without bound. A reply shared by several workers counts for each.
//
// Over the limit, a push is refused only from a worker that holds at least its fair share
// (limit / workers): one flooding peer cannot make the others' pushes fail, and what the
// server holds stays below about twice the limit. Shared-memory pushes (TFPS_SHM_SERVER)
// live in the worker's segment and do not count.
//
// Admit runs on the I/O thread; the counts drop on whichever thread frees a payload.
#ifndef TFPS_PS_SERVER_PUSH_BUDGET_H_
#define TFPS_PS_SERVER_PUSH_BUDGET_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <zmq.hpp>

#include "ps_server/buffer.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

class PushBudget {
 public:
  PushBudget(uint64_t limit, int num_workers);

  // A push counts the larger of its payload and the reply it stands for (Charge), at
  // least 4 KiB (its round's bookkeeping).
  static uint64_t Charge(const Header& h, uint64_t payload_bytes);
  // Ok if the push `h` of `payload_bytes` may be accepted; else ResourceExhausted naming
  // the server, the worker, the tensor's key, partition and step, and what to do.
  Status Admit(const Header& h, uint64_t payload_bytes, int server_id) const;
  // The payload of the push `h` as a Buffer counted (Charge) against its sender until its
  // last reference dies.
  Buffer Hold(const Header& h, zmq::message_t message);
  // The reply `payload` for worker `rank`, counted against it until its last reference
  // dies (ZeroMQ frees it once written or dropped). A borrowed (shared-memory) or empty
  // payload is returned as it is.
  Buffer HoldReply(int rank, Buffer payload);

  // A refusal's text (Admit's status) for worker `rank` in *out, counted apart from the
  // budget until ZeroMQ has written it: at most kRefusalBytes of them unread per worker
  // (a worker that reads gets every one). False, and nothing in *out, beyond that: a
  // worker that never reads while pushing on cannot queue refusals without bound.
  static constexpr uint64_t kRefusalBytes = 1 << 20;
  bool HoldRefusal(int rank, const std::string& text, Buffer* out);

  uint64_t held() const;
  uint64_t held_by(int rank) const;
  uint64_t limit() const { return limit_; }

 private:
  struct Counts;
  const uint64_t limit_;
  const int num_workers_;
  std::shared_ptr<Counts> counts_;  // shared with every held payload, which may outlive us
};

}  // namespace tfps

#endif  // TFPS_PS_SERVER_PUSH_BUDGET_H_

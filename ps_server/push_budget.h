// The bytes of pushes a server holds and has not answered yet (TFPS_SERVER_PUSH_BYTES).
// A push's payload counts from the moment the I/O thread accepts it until its last
// reference dies, wherever it is then: queued for a summation thread, the accumulator of a
// round that waits for the other workers, a kept push of a stale round, or the sum on its
// way out. So a peer that pushes many distinct keys or steps and never completes them (a
// hostile one, or one far ahead of the others) cannot grow the server without bound.
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

#include <zmq.hpp>

#include "ps_server/buffer.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

class PushBudget {
 public:
  PushBudget(uint64_t limit, int num_workers);

  // A push counts its payload's size, at least 4 KiB (its round's bookkeeping).
  // Ok if the push `h` of `payload_bytes` may be accepted; else ResourceExhausted naming
  // the server, the worker, the tensor's key, partition and step, and what to do.
  Status Admit(const Header& h, uint64_t payload_bytes, int server_id) const;
  // The payload as a Buffer counted against `rank` until its last reference dies.
  Buffer Hold(int rank, zmq::message_t message);

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

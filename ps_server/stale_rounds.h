// The data side of ssp:S and asp (docs/consistency.md); bsp goes through sum_rounds.h.
// Summation mode: each push of a (key, partition) joins a log, and each worker's read sums
// the pushes it has not yet been sent (its own included, its own later ones not), so every
// push reaches every worker exactly once, in the first read of that worker that leaves
// after it arrived. The
// divisor a worker applies stays size(): over a run each worker adds every gradient once.
// PS mode: each push updates the parameter when it arrives (the optimizer sees one
// worker's gradient over size(), as in bsp's average), and a read answers the parameter as
// it is when the read leaves. When a read may leave is ClockTable's business (clocks.h).
// Broadcasts and PS initialisation stay bsp (KeyStore never sends them here).
// Owned by one summation thread: no locks.
#ifndef TFPS_PS_SERVER_STALE_ROUNDS_H_
#define TFPS_PS_SERVER_STALE_ROUNDS_H_

#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "ps_server/buffer.h"
#include "ps_server/clocks.h"
#include "ps_server/outgoing.h"
#include "ps_server/parameter_store.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

class StaleRounds {
 public:
  using Clock = ClockTable::Clock;

  // `trace_path`: where to append one line per read that leaves (TFPS_CONSISTENCY_TRACE);
  // empty: no trace.
  StaleRounds(int num_workers, int server_id, Consistency consistency, ParameterStore* params,
              const std::string& trace_path);
  ~StaleRounds();

  // A push that bsp rounds handle (a broadcast, an init) still moves the sender's clock.
  void Observe(const Header& h) { clocks_.Advance(SlotOf(h), h.sender, h.step); }
  // A data push (summation or PS update): joins the log or updates the parameter, then
  // answers every read it lets leave (its own, under asp always).
  void Add(const Head& head, Buffer payload, std::vector<Outgoing>* out);
  void OnWorkerLost(int rank, const std::string& why, std::vector<Outgoing>* out);
  // Reads waiting on live workers: warnings, and failures after TFPS_STALL_SHUTDOWN
  // (ClockTable::Expired), naming the workers they wait for.
  void OnTick(Clock::time_point now, const StallPolicy& stall, std::vector<Outgoing>* out,
              std::vector<std::string>* warnings);

  size_t waiting() const { return clocks_.waiting(); }
  size_t logged() const;  // pushes kept for workers not yet sent them

 private:
  using Slot = ClockTable::Slot;
  struct Entry {
    uint64_t seq;
    int sender;
    uint64_t step;
    Buffer data;  // float32 when the pushes are compressed (decoded on arrival)
    std::vector<bool> sent;  // per worker
  };
  struct SlotState {
    Head first;  // the first push: what every later one must match
    uint64_t codec_k = 0;
    std::deque<Entry> log;
    uint64_t next_seq = 0;
    std::vector<uint64_t> delivered;  // per worker: every seq below was sent to it
  };

  static Slot SlotOf(const Header& h) { return Slot(h.key, h.partition); }
  // Why this push cannot join `slot` (it disagrees with the first); Ok if it can.
  Status Mismatch(const SlotState& state, const Head& head) const;
  Status Decode(SlotState& state, const Header& h, Buffer* payload) const;
  Status ApplyNow(const Head& head, Buffer payload);
  // Sends the read its answer: the unsent sum, or the parameter as it is now.
  void Release(const ClockTable::Read& read, std::vector<Outgoing>* out);
  Status SumFor(SlotState& state, const Header& push, Buffer* reply, int* summed);
  Status ParameterFor(const Header& push, Buffer* reply, uint64_t* count);
  void Collect(SlotState& state);  // drops log entries every live worker has been sent
  void Trace(const Header& push, uint64_t min_clock, int summed);

  const int num_workers_;
  const int server_id_;
  ParameterStore* params_;
  ClockTable clocks_;
  std::map<Slot, SlotState> slots_;
  // Sparse PS reads: the row ids each update touched, answered with their rows when the
  // read leaves. By (key, partition, step, rank).
  std::map<std::tuple<uint64_t, uint32_t, uint64_t, int>, std::vector<int64_t>> sparse_ids_;
  std::set<int> lost_;
  FILE* trace_ = nullptr;
};

}  // namespace tfps

#endif  // TFPS_PS_SERVER_STALE_ROUNDS_H_

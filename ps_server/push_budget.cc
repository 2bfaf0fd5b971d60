#include "ps_server/push_budget.h"

#include <algorithm>
#include <sstream>
#include <utility>
#include <vector>

namespace tfps {

struct PushBudget::Counts {
  explicit Counts(int num_workers) : by_rank(num_workers) {}
  std::atomic<uint64_t> total{0};
  std::vector<std::atomic<uint64_t>> by_rank;
};

namespace {

// What a push costs at least, whatever its payload: the round it may open, its head, and
// the receive buffer ZeroMQ may keep for a small message. A flood of tiny pushes to
// distinct keys is bounded too.
constexpr uint64_t kMinCharge = 4096;

uint64_t Charge(uint64_t payload_bytes) { return std::max(payload_bytes, kMinCharge); }

// Keeps a received message alive and gives its bytes back to the counts when freed.
struct Held {
  Held(zmq::message_t m, std::shared_ptr<void> counts, std::atomic<uint64_t>* total,
       std::atomic<uint64_t>* mine)
      : message(std::move(m)), keep(std::move(counts)), total(total), mine(mine) {}
  ~Held() {
    total->fetch_sub(Charge(message.size()), std::memory_order_relaxed);
    mine->fetch_sub(Charge(message.size()), std::memory_order_relaxed);
  }
  zmq::message_t message;
  std::shared_ptr<void> keep;  // the counts outlive every payload counted in them
  std::atomic<uint64_t>* total;
  std::atomic<uint64_t>* mine;
};

std::string MiB(uint64_t bytes) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << bytes / 1048576.0 << " MiB";
  return out.str();
}

}  // namespace

PushBudget::PushBudget(uint64_t limit, int num_workers)
    : limit_(limit),
      num_workers_(num_workers > 0 ? num_workers : 1),
      counts_(std::make_shared<Counts>(num_workers_)) {}

Status PushBudget::Admit(const Header& h, uint64_t payload_bytes, int server_id) const {
  const uint64_t bytes = Charge(payload_bytes);
  const uint64_t total = counts_->total.load(std::memory_order_relaxed);
  if (total + bytes <= limit_) return Status::Ok();
  const uint64_t mine = held_by(h.sender);
  const uint64_t share = limit_ / static_cast<uint64_t>(num_workers_);
  if (mine + bytes <= share) return Status::Ok();  // the others hold the rest: not its fault
  return ResourceExhausted(
      "server " + std::to_string(server_id) + " refused worker " + std::to_string(h.sender) +
      "'s push of tensor key " + std::to_string(h.key) + " (partition " +
      std::to_string(h.partition) + ", step " + std::to_string(h.step) + ", " + MiB(bytes) +
      "): the server holds " + MiB(total) + " of pushes not yet answered, " + MiB(mine) +
      " of them this worker's, over TFPS_SERVER_PUSH_BYTES=" + std::to_string(limit_) +
      " (a worker pushes far ahead of the others, or pushes tensors they never push); "
      "raise TFPS_SERVER_PUSH_BYTES on the servers if the job needs more in flight");
}

Buffer PushBudget::Hold(int rank, zmq::message_t message) {
  const uint64_t charge = Charge(message.size());
  std::atomic<uint64_t>* mine = &counts_->by_rank[rank];
  counts_->total.fetch_add(charge, std::memory_order_relaxed);
  mine->fetch_add(charge, std::memory_order_relaxed);
  auto held = std::make_shared<Held>(std::move(message), counts_, &counts_->total, mine);
  return Buffer::Adopt(held->message.data(), held->message.size(), held);
}

uint64_t PushBudget::held() const { return counts_->total.load(std::memory_order_relaxed); }

uint64_t PushBudget::held_by(int rank) const {
  if (rank < 0 || rank >= num_workers_) return 0;
  return counts_->by_rank[rank].load(std::memory_order_relaxed);
}

}  // namespace tfps

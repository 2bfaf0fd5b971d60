#include "ps_server/push_budget.h"

#include <algorithm>
#include <sstream>
#include <utility>
#include <vector>

namespace tfps {

struct PushBudget::Counts {
  explicit Counts(int num_workers) : by_rank(num_workers), refusals(num_workers) {}
  std::atomic<uint64_t> total{0};
  std::vector<std::atomic<uint64_t>> by_rank;
  std::atomic<uint64_t> refusals_total{0};
  std::vector<std::atomic<uint64_t>> refusals;  // by rank: HoldRefusal's, not yet written
};

namespace {

// What a push costs at least, whatever its payload: the round it may open, its head, and
// the receive buffer ZeroMQ may keep for a small message. A flood of tiny pushes to
// distinct keys is bounded too.
constexpr uint64_t kMinCharge = 4096;

// Gives `bytes` back to the counts when freed; keeps what it counts for alive until then.
struct Counted {
  Counted(uint64_t bytes, std::shared_ptr<void> counts, std::atomic<uint64_t>* total,
          std::atomic<uint64_t>* mine)
      : bytes(bytes), keep(std::move(counts)), total(total), mine(mine) {
    total->fetch_add(bytes, std::memory_order_relaxed);
    mine->fetch_add(bytes, std::memory_order_relaxed);
  }
  ~Counted() {
    total->fetch_sub(bytes, std::memory_order_relaxed);
    mine->fetch_sub(bytes, std::memory_order_relaxed);
  }
  const uint64_t bytes;
  std::shared_ptr<void> keep;  // the counts outlive every payload counted in them
  std::atomic<uint64_t>* total;
  std::atomic<uint64_t>* mine;
};

// A received push's message, counted.
struct HeldPush : Counted {
  HeldPush(zmq::message_t m, uint64_t bytes, std::shared_ptr<void> counts,
           std::atomic<uint64_t>* total, std::atomic<uint64_t>* mine)
      : Counted(bytes, std::move(counts), total, mine), message(std::move(m)) {}
  zmq::message_t message;
};

// A reply's bytes (whatever owns them), counted.
struct HeldReply : Counted {
  HeldReply(std::shared_ptr<void> owner, uint64_t bytes, std::shared_ptr<void> counts,
            std::atomic<uint64_t>* total, std::atomic<uint64_t>* mine)
      : Counted(bytes, std::move(counts), total, mine), owner(std::move(owner)) {}
  std::shared_ptr<void> owner;
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

uint64_t PushBudget::Charge(const Header& h, uint64_t payload_bytes) {
  // A sparse push stands for its rows, all in its payload (wire/message.h); any other for
  // count x element size (a compressed one: its float32 decoding), checked against
  // TFPS_MAX_MESSAGE_BYTES before this.
  uint64_t reply = 0;
  if ((h.flags & kFlagSparse) == 0) reply = h.count * DTypeSize(static_cast<DType>(h.dtype));
  return std::max({payload_bytes, reply, kMinCharge});
}

Status PushBudget::Admit(const Header& h, uint64_t payload_bytes, int server_id) const {
  const uint64_t bytes = Charge(h, payload_bytes);
  const uint64_t total = counts_->total.load(std::memory_order_relaxed);
  if (total + bytes <= limit_) return Status::Ok();
  const uint64_t mine = held_by(h.sender);
  const uint64_t share = limit_ / static_cast<uint64_t>(num_workers_);
  if (mine + bytes <= share) return Status::Ok();  // the others hold the rest: not its fault
  return ResourceExhausted(
      "server " + std::to_string(server_id) + " refused worker " + std::to_string(h.sender) +
      "'s push of tensor key " + std::to_string(h.key) + " (partition " +
      std::to_string(h.partition) + ", step " + std::to_string(h.step) + ", " + MiB(bytes) +
      "): the server holds " + MiB(total) + " of pushes not yet answered and replies not "
      "yet read, " + MiB(mine) + " of them this worker's, over TFPS_SERVER_PUSH_BYTES=" + std::to_string(limit_) +
      " (a worker pushes far ahead of the others, pushes tensors they never push, or does "
      "not read its replies); "
      "raise TFPS_SERVER_PUSH_BYTES on the servers if the job needs more in flight");
}

Buffer PushBudget::Hold(const Header& h, zmq::message_t message) {
  const uint64_t charge = Charge(h, message.size());
  auto held = std::make_shared<HeldPush>(std::move(message), charge, counts_, &counts_->total,
                                         &counts_->by_rank[h.sender]);
  return Buffer::Adopt(held->message.data(), held->message.size(), held);
}

Buffer PushBudget::HoldReply(int rank, Buffer payload) {
  if (rank < 0 || rank >= num_workers_ || payload.size() == 0 || payload.borrowed()) {
    return payload;
  }
  auto held = std::make_shared<HeldReply>(payload.owner(), payload.size(), counts_,
                                          &counts_->total, &counts_->by_rank[rank]);
  return Buffer::Adopt(payload.data(), payload.size(), std::move(held));
}

bool PushBudget::HoldRefusal(int rank, const std::string& text, Buffer* out) {
  if (rank < 0 || rank >= num_workers_) return false;
  // Its head and ZeroMQ's bookkeeping of the two frames count too.
  const uint64_t bytes = text.size() + 256;
  std::atomic<uint64_t>* mine = &counts_->refusals[rank];
  if (mine->load(std::memory_order_relaxed) + bytes > kRefusalBytes) return false;
  Buffer copy = Buffer::CopyOf(text.data(), text.size());
  auto held = std::make_shared<HeldReply>(copy.owner(), bytes, counts_,
                                          &counts_->refusals_total, mine);
  *out = Buffer::Adopt(copy.data(), copy.size(), std::move(held));
  return true;
}

uint64_t PushBudget::held() const { return counts_->total.load(std::memory_order_relaxed); }

uint64_t PushBudget::held_by(int rank) const {
  if (rank < 0 || rank >= num_workers_) return 0;
  return counts_->by_rank[rank].load(std::memory_order_relaxed);
}

}  // namespace tfps

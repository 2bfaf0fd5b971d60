#include "ps_server/stale_rounds.h"

#include <algorithm>
#include <cstring>

#include "ps_server/reduce.h"
#include "tf_ps_ops/cc/codec/codec.h"
#include "tf_ps_ops/cc/common/logging.h"

namespace tfps {

namespace {

std::string WherePush(int server_id, const Header& h) {
  return "server " + std::to_string(server_id) + ", step " + std::to_string(h.step) +
         ", partition " + std::to_string(h.partition);
}

// A one-push round: what ParameterStore updates a parameter from.
Round RoundOfPush(const Head& head, Buffer payload, int num_workers) {
  const Header& h = head.header;
  Round r;
  r.id = RoundId(h.key, h.partition, h.step);
  r.first = h;
  r.dims = head.dims;
  r.params = head.params;
  r.first_sender = h.sender;
  r.arrived.assign(num_workers, false);
  r.arrived[h.sender] = true;
  r.answered.assign(num_workers, false);
  r.num_arrived = 1;
  if ((h.flags & kFlagSparse) != 0) {
    r.rows.resize(num_workers);
    r.rows[h.sender] = std::move(payload);
  } else {
    r.sum = std::move(payload);
    r.has_data = true;
  }
  return r;
}

}  // namespace

StaleRounds::StaleRounds(int num_workers, int server_id, Consistency consistency,
                         ParameterStore* params, const std::string& trace_path)
    : num_workers_(num_workers),
      server_id_(server_id),
      params_(params),
      clocks_(num_workers, server_id, consistency) {
  if (!trace_path.empty()) {
    trace_ = std::fopen(trace_path.c_str(), "a");
    if (trace_ == nullptr) {
      TFPS_LOG(Warning) << "TFPS_CONSISTENCY_TRACE: cannot open " << trace_path
                        << " for appending; no trace";
    }
  }
}

StaleRounds::~StaleRounds() {
  if (trace_ != nullptr) std::fclose(trace_);
}

size_t StaleRounds::logged() const {
  size_t n = 0;
  for (const auto& s : slots_) n += s.second.log.size();
  return n;
}

Status StaleRounds::Mismatch(const SlotState& state, const Head& head) const {
  const Header& h = head.header;
  const Header& f = state.first.header;
  constexpr uint32_t kModeFlags = kFlagPsApply | kFlagSparse;
  const bool sparse = (h.flags & kFlagSparse) != 0;
  if ((h.flags & kModeFlags) != (f.flags & kModeFlags) || h.optimizer != f.optimizer ||
      h.codec != f.codec || h.dtype != f.dtype || head.dims != state.first.dims ||
      (!sparse && h.count != f.count) || h.num_partitions != f.num_partitions) {
    return InvalidArgument(
        "this push disagrees with worker " + std::to_string(f.sender) + "'s first push of the "
        "tensor: " + DescribeTensor(static_cast<DType>(f.dtype), state.first.dims) + " (" +
        OptimizerName(static_cast<Optimizer>(f.optimizer)) + ", codec " +
        CodecIdName(static_cast<CodecId>(f.codec)) + ") against " +
        DescribeTensor(static_cast<DType>(h.dtype), head.dims) + " (" +
        OptimizerName(static_cast<Optimizer>(h.optimizer)) + ", codec " +
        CodecIdName(static_cast<CodecId>(h.codec)) + ") from worker " +
        std::to_string(h.sender) + " (" + WherePush(server_id_, h) + ")");
  }
  return Status::Ok();
}

// As SumRounds::DecodeInto: a compressed payload becomes its float32 decoding.
Status StaleRounds::Decode(SlotState& state, const Header& h, Buffer* payload) const {
  const auto id = static_cast<CodecId>(h.codec);
  uint64_t k = 0;
  TFPS_RETURN_IF_ERROR(CheckEncoded(id, h.count, payload->size(), &k));
  if (state.next_seq == 0 && state.log.empty()) {
    state.codec_k = k;
  } else if (k != state.codec_k) {
    return InvalidArgument("workers disagree on the " + std::string(CodecIdName(id)) +
                           " ratio: " + std::to_string(state.codec_k) + " elements kept, worker " +
                           std::to_string(h.sender) + " " + std::to_string(k) + " (" +
                           WherePush(server_id_, h) + ")");
  }
  Buffer decoded = Buffer::Allocate(h.count * sizeof(float));
  TFPS_RETURN_IF_ERROR(tfps::Decode(id, reinterpret_cast<const uint8_t*>(payload->data()),
                                    h.count, k, RandomKSeed(h.key, h.partition, h.step),
                                    reinterpret_cast<float*>(decoded.data())));
  *payload = std::move(decoded);
  return Status::Ok();
}

Status StaleRounds::ApplyNow(const Head& head, Buffer payload) {
  const Header& h = head.header;
  Round round = RoundOfPush(head, std::move(payload), num_workers_);
  Buffer reply;
  if ((h.flags & kFlagSparse) == 0) return params_->Apply(round, &reply);
  uint64_t rows = 0;
  TFPS_RETURN_IF_ERROR(params_->ApplySparse(round, &reply, &rows));
  const auto* ids = reinterpret_cast<const int64_t*>(reply.data());
  sparse_ids_[{h.key, h.partition, h.step, h.sender}].assign(ids, ids + rows);
  return Status::Ok();
}

void StaleRounds::Add(const Head& head, Buffer payload, std::vector<Outgoing>* out) {
  const Header& h = head.header;
  const Slot slot = SlotOf(h);
  auto [it, fresh] = slots_.try_emplace(slot);
  SlotState& state = it->second;
  if (fresh) {
    state.first = head;
    state.delivered.assign(num_workers_, 0);
  }
  Status s = Mismatch(state, head);
  const uint64_t clock = clocks_.ClockOf(slot, h.sender);
  if (s.ok() && h.step <= clock) {  // one engine thread, one connection: steps only grow
    s = InvalidArgument("worker " + std::to_string(h.sender) + " pushed step " +
                        std::to_string(h.step) + " after step " + std::to_string(clock) +
                        " (pushed twice, or out of order; " + WherePush(server_id_, h) + ")");
  }
  if (s.ok() && h.codec != 0) s = Decode(state, h, &payload);
  if (s.ok() && (h.flags & kFlagPsApply) != 0) s = ApplyNow(head, std::move(payload));
  if (!s.ok()) {  // this push counts for nothing; its sender learns why
    out->push_back(ErrorReply(h, h.sender, server_id_, s));
    return;
  }
  if ((h.flags & kFlagPsApply) == 0) {
    state.log.push_back(Entry{state.next_seq++, h.sender, h.step, std::move(payload),
                              std::vector<bool>(num_workers_, false)});
  }
  clocks_.Advance(slot, h.sender, h.step);
  const ClockTable::Read read{h, Clock::now()};
  if (clocks_.MayRead(slot, h.step)) {
    Release(read, out);
  } else {
    clocks_.Wait(read);
  }
  std::vector<ClockTable::Read> ready;
  std::vector<ClockTable::Failed> failed;
  clocks_.Ready(slot, &ready, &failed);  // reads this push's clock unblocked
  for (const auto& r : ready) Release(r, out);
  for (const auto& f : failed) out->push_back(ErrorReply(f.read.push, f.read.push.sender,
                                                         server_id_, f.status));
}

Status StaleRounds::SumFor(SlotState& state, const Header& push, Buffer* reply, int* summed) {
  const int rank = push.sender;
  const bool coded = push.codec != 0;
  const DType dtype = coded ? DType::kFloat32 : static_cast<DType>(push.dtype);
  const size_t bytes = push.count * DTypeSize(dtype);
  Buffer sum;
  uint64_t next = state.delivered[rank];  // entries below were all sent to this worker
  bool contiguous = true;
  for (Entry& e : state.log) {
    if (e.seq < next || e.sent[rank]) continue;
    if (e.sender == rank && e.step > push.step) {  // the worker's later push: its own read
      contiguous = false;
      continue;
    }
    if (*summed == 0) {
      sum = Buffer::CopyOf(e.data.data(), bytes);  // the log keeps its own: others need it
    } else {
      SumInto(dtype, sum.data(), e.data.data(), push.count);
    }
    ++*summed;
    e.sent[rank] = true;
    if (contiguous) next = e.seq + 1;
  }
  state.delivered[rank] = next;
  if (*summed == 0) sum = Buffer::Zeros(bytes);  // its push went out with an earlier read
  if (!coded) {
    *reply = std::move(sum);
    return Status::Ok();
  }
  // Plain re-encoding: the thread's error feedback memory belongs to bsp's one sum per
  // step; here each worker's reply is a different sum (docs/consistency.md).
  const auto id = static_cast<CodecId>(push.codec);
  Buffer encoded = Buffer::Allocate(EncodedBytes(id, push.count, state.codec_k));
  TFPS_RETURN_IF_ERROR(Encode(id, reinterpret_cast<const float*>(sum.data()), push.count,
                              state.codec_k, RandomKSeed(push.key, push.partition, push.step),
                              reinterpret_cast<uint8_t*>(encoded.data())));
  *reply = std::move(encoded);
  return Status::Ok();
}

Status StaleRounds::ParameterFor(const Header& push, Buffer* reply, uint64_t* count) {
  const auto it = params_->params().find(ParamId(push.key, push.partition));
  if (it == params_->params().end()) {
    return Internal("the parameter vanished before its read left (" +
                    WherePush(server_id_, push) + ")");
  }
  const ShardParam& p = it->second;
  if ((push.flags & kFlagSparse) == 0) {
    *reply = Buffer::CopyOf(p.value.data(), p.value.size());
    *count = p.count;
    return Status::Ok();
  }
  const auto key = std::make_tuple(push.key, push.partition, push.step, int(push.sender));
  const std::vector<int64_t> ids = std::move(sparse_ids_[key]);
  sparse_ids_.erase(key);
  const uint64_t row = RowElements(slots_.at(SlotOf(push)).first.dims);
  const size_t row_bytes = row * DTypeSize(p.dtype);
  *reply = Buffer::Allocate(ids.size() * (sizeof(int64_t) + row_bytes));
  auto* out_ids = reinterpret_cast<int64_t*>(reply->data());
  std::copy(ids.begin(), ids.end(), out_ids);
  char* rows = reinterpret_cast<char*>(out_ids + ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {  // the rows as they are now, not at the update
    std::memcpy(rows + i * row_bytes, p.value.data() + ids[i] * row_bytes, row_bytes);
  }
  *count = ids.size();
  return Status::Ok();
}

void StaleRounds::Release(const ClockTable::Read& read, std::vector<Outgoing>* out) {
  const Header& push = read.push;
  SlotState& state = slots_.at(SlotOf(push));
  Buffer reply;
  uint64_t count = push.count;
  int summed = 0;
  const bool ps = (push.flags & kFlagPsApply) != 0;
  Status s = ps ? ParameterFor(push, &reply, &count) : SumFor(state, push, &reply, &summed);
  if (!s.ok()) {
    out->push_back(ErrorReply(push, push.sender, server_id_, s));
    return;
  }
  Trace(push, clocks_.MinClock(SlotOf(push)), ps ? 1 : summed);
  const bool sparse = (push.flags & kFlagSparse) != 0;
  Head head;
  head.header = push;
  head.header.type = static_cast<uint16_t>(MsgType::kPushPullReply);
  head.header.flags = sparse ? kFlagSparse : 0;
  head.header.count = count;
  head.header.optimizer = 0;
  head.header.nparams = 0;
  head.header.ndims = 0;
  head.header.sender = server_id_;
  if (ps) head.header.codec = 0;  // a compressed PS push is answered with float32 parameters
  if (sparse) head.dims = state.first.dims;
  out->push_back(Outgoing{WorkerIdentity(push.sender), EncodeHead(head), std::move(reply)});
  if (!ps) Collect(state);
}

void StaleRounds::Collect(SlotState& state) {
  uint64_t low = UINT64_MAX;
  for (int rank = 0; rank < num_workers_; ++rank) {
    if (lost_.count(rank) == 0) low = std::min(low, state.delivered[rank]);
  }
  while (!state.log.empty() && state.log.front().seq < low) state.log.pop_front();
}

void StaleRounds::Trace(const Header& push, uint64_t min_clock, int summed) {
  if (trace_ == nullptr) return;
  std::fprintf(trace_, "%d %llu %u %llu %llu %d\n", push.sender,
               static_cast<unsigned long long>(push.key), push.partition,
               static_cast<unsigned long long>(push.step),
               static_cast<unsigned long long>(min_clock), summed);
  std::fflush(trace_);
}

void StaleRounds::OnWorkerLost(int rank, const std::string& why, std::vector<Outgoing>* out) {
  lost_.insert(rank);
  for (const auto& f : clocks_.OnWorkerLost(rank, why)) {
    out->push_back(ErrorReply(f.read.push, f.read.push.sender, server_id_, f.status));
  }
  for (auto& s : slots_) Collect(s.second);
}

void StaleRounds::OnTick(Clock::time_point now, const StallPolicy& stall,
                         std::vector<Outgoing>* out, std::vector<std::string>* warnings) {
  for (const auto& f : clocks_.Expired(now, stall, warnings)) {
    TFPS_LOG(Warning) << f.status.message();
    out->push_back(ErrorReply(f.read.push, f.read.push.sender, server_id_, f.status));
  }
}

}  // namespace tfps

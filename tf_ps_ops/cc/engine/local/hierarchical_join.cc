// hvd.join() under hierarchical aggregation (docs/hierarchical.md, "join()"): Hierarchical's
// side. A joined local leader keeps its members going: when one hands over its input of
// the leader's next step of a name (ShmLocalReduce's poll thread notices), the leader runs
// that step as if its own caller had called the name again with zeros, through the usual
// path, so step numbers stay aligned and the local sum goes to the servers as always.
#include <chrono>

#include "tf_ps_ops/cc/common/logging.h"
#include "tf_ps_ops/cc/engine/local/hierarchical.h"

namespace tfps {

void Hierarchical::RememberLocked(const PushPullRequest& r) {
  if (r.join_zeros || r.device >= 0 || r.flags != 0) return;
  PushPullRequest& known = known_[KeyOfName(r.name)];
  known.name = r.name;
  known.dtype = r.dtype;
  known.dims = r.dims;
  known.count = r.count;
  known.priority = r.priority;
}

Status Hierarchical::BeginJoin(bool* leads) {
  *leads = false;
  if (!reduce_) return Status::Ok();  // alone on its host: the servers count it as usual
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (device_tensors_) {
      return FailedPrecondition(
          "join() is not available under hierarchical aggregation once GPU tensors were "
          "summed on this host (NCCL): set TFPS_HIERARCHICAL=0 on every worker to use join()");
    }
  }
  bool members_joined = true;
  TFPS_RETURN_IF_ERROR(
      reduce_->BeginJoin([this](uint64_t key) { ServeJoined(key); }, &members_joined));
  *leads = reduce_->local_rank() == 0 && !members_joined;
  return Status::Ok();
}

bool Hierarchical::MembersJoined() { return !reduce_ || reduce_->MembersJoined(); }

void Hierarchical::EndJoin() {
  if (reduce_) reduce_->EndJoin();
}

void Hierarchical::ServeJoined(uint64_t key) {
  PushPullRequest request;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = known_.find(key);
    if (it == known_.end()) return;
    request = it->second;
  }
  const uint64_t bytes = request.count * DTypeSize(request.dtype);
  auto zeros = std::make_shared<std::vector<char>>(2 * bytes, 0);  // input, then output
  request.input = zeros->data();
  request.output = zeros->data() + bytes;
  request.input_holder = zeros;
  request.join_zeros = true;
  request.enqueued = std::chrono::steady_clock::now();
  request.done = [](const Status& s) {
    // The members that handed their inputs over get the same error through the segment.
    if (!s.ok() && s.code() != Code::kAborted) {
      TFPS_LOG(Warning) << "join(): the local leader's step for its members: " << s.message();
    }
  };
  EnqueueChunk(std::move(request));
}

}  // namespace tfps

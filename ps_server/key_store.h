// The state of one summation thread's keys: its summation rounds (sum_rounds.h) and, in PS
// mode, its parameters (parameter_store.h). A push joins its round; when the last worker's
// push is in, the round is answered: in summation mode with the sum, in PS mode with the
// parameter the round initialised or updated. Every worker of a round gets the same reply
// buffer. A compressed round's float32 sum is re-encoded with the round's codec, with this
// thread's own error feedback memory (docs/compression.md). Owned by one thread: no locks.
#ifndef TFPS_PS_SERVER_KEY_STORE_H_
#define TFPS_PS_SERVER_KEY_STORE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ps_server/buffer.h"
#include "ps_server/checkpoint.h"
#include "ps_server/outgoing.h"
#include "ps_server/parameter_store.h"
#include "ps_server/stale_rounds.h"
#include "ps_server/sum_rounds.h"
#include "tf_ps_ops/cc/codec/error_feedback.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

class KeyStore {
 public:
  using Clock = std::chrono::steady_clock;

  // Under ssp/asp (`consistency`), data pushes go to StaleRounds (stale_rounds.h), with
  // `trace_path` for its trace (TFPS_CONSISTENCY_TRACE); broadcasts and PS initialisation
  // stay bsp rounds.
  KeyStore(int num_workers, int server_id, const StallPolicy& stall,
           Consistency consistency = Consistency(), const std::string& trace_path = "");

  // `received_us`: when the push arrived (wall clock), for timed replies.
  void OnPush(const Head& head, Buffer payload, std::vector<Outgoing>* out,
              double received_us = 0);
  // The worker is gone: every open round that still needs it fails, and so will new ones.
  // hvd.join() (SumRounds::OnJoin); answers the rounds it completes.
  void OnJoin(const Head& join, bool answer, std::vector<Outgoing>* out) {
    std::vector<Round> complete;
    rounds_.OnJoin(join, answer, out, &complete);
    for (Round& round : complete) Answer(round, out);
  }
  void OnWorkerLost(int rank, const std::string& why, std::vector<Outgoing>* out) {
    rounds_.OnWorkerLost(rank, why, out);
    if (stale_) stale_->OnWorkerLost(rank, why, out);
  }
  // Rounds (and ssp reads) waiting on live workers: stall warnings to *warnings (when
  // given), failures after TFPS_STALL_SHUTDOWN, naming the workers still missing.
  void OnTick(Clock::time_point now, std::vector<Outgoing>* out,
              std::vector<std::string>* warnings = nullptr) {
    rounds_.OnTick(now, out, warnings);
    if (stale_) stale_->OnTick(now, stall_, out, warnings);
  }

  // Each rank's host, for the check of local sums (SumRounds::SetWorkerHosts).
  void SetWorkerHosts(const std::vector<std::string>& hosts) { rounds_.SetWorkerHosts(hosts); }

  size_t open_rounds() const { return rounds_.open(); }
  size_t num_parameters() const { return params_.size(); }

  // Checkpoints (parameter_store.h).
  const ShardParams& params() const { return params_.params(); }
  void RestoreParams(ShardParams params) { params_.Restore(std::move(params)); }
  bool CheckpointDue(uint64_t every) const { return params_.CheckpointDue(every); }
  void MarkCheckpointed() { params_.MarkCheckpointed(); }

 private:
  // The reply to every worker of a complete round, or its failure.
  void Answer(Round& round, std::vector<Outgoing>* out);
  // What the round answers: the sum, or the parameter it initialised or updated
  // (`*count`: elements, or rows of a sparse update).
  Status Result(Round& round, Buffer* reply, uint64_t* count);
  // A compressed round: *reply (the float32 sum) becomes its encoding.
  Status Compress(const Round& round, Buffer* reply);
  // The reply's head: the round's first push turned into its answer.
  Head ReplyHead(const Round& round, uint64_t count) const;

  const int num_workers_;
  const int server_id_;
  const StallPolicy stall_;
  SumRounds rounds_;
  ParameterStore params_;
  std::unique_ptr<StaleRounds> stale_;  // ssp/asp only; uses params_
  ErrorFeedback feedback_;  // per (key, partition) of the compressed sums this thread answers
};

}  // namespace tfps

#endif  // TFPS_PS_SERVER_KEY_STORE_H_

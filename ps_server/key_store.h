// The state of one server thread's keys: summation rounds and, in PS mode, parameters.
//
// A round is (key, partition, step). It collects one push from every worker; the first
// push with data becomes the accumulator (no copy), later ones are summed into it, and
// when the last worker's push is in, every worker gets the same sum (one buffer shared by
// all replies). Rounds of different steps are independent, so a push for step t+1 that
// arrives while step t is still open corrupts nothing. Owned by one thread: no locks.
//
// PS mode uses the same rounds: an init round (root's value, kFlagPsInit) creates the
// parameter and its optimizer slots unless it exists (with kFlagPsOverwrite it replaces the
// value and drops the slots); an apply round (kFlagPsApply) sums the gradients, applies the
// optimizer once, and answers the new parameter values. A sparse apply round (kFlagSparse)
// keeps each worker's rows, sums them per row id in rank order, updates those rows only and
// answers them (the union of the rows touched). The parameters are what a server
// checkpoint holds (ps_server/checkpoint.h).
#ifndef TFPS_PS_SERVER_KEY_STORE_H_
#define TFPS_PS_SERVER_KEY_STORE_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "ps_server/checkpoint.h"
#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/wire/message.h"

namespace tfps {

// A reply for the I/O thread to send.
struct Outgoing {
  std::string identity;  // worker routing id
  std::string head;      // encoded head frame
  zmq::message_t payload;
};

std::string WorkerIdentity(int rank);

class KeyStore {
 public:
  using Clock = std::chrono::steady_clock;

  KeyStore(int num_workers, int server_id, double timeout_s);

  // `received_us`: when the push arrived (wall clock), for timed replies.
  void OnPush(const Head& head, zmq::message_t payload, std::vector<Outgoing>* out,
              double received_us = 0);
  // The worker is gone: every open round that still needs it fails, and so will new ones.
  void OnWorkerLost(int rank, const std::string& why, std::vector<Outgoing>* out);
  // Fails rounds that waited longer than the timeout, naming the workers still missing.
  void OnTick(Clock::time_point now, std::vector<Outgoing>* out);

  size_t open_rounds() const { return rounds_.size(); }
  size_t num_parameters() const { return params_.size(); }

  // Checkpoints. The parameters held, with their update counts.
  const ShardParams& params() const { return params_; }
  // Replaces every parameter (a checkpoint read back, before serving).
  void RestoreParams(ShardParams params);
  // True when every parameter updated so far has the same update count, a multiple of
  // `every` (> 0), and this state (count, number of such parameters) is not yet written.
  bool CheckpointDue(uint64_t every) const;
  void MarkCheckpointed();

 private:
  using RoundId = std::tuple<uint64_t, uint32_t, uint64_t>;  // key, partition, step
  using Param = ShardParam;
  struct Round {
    Header first;               // the first push's header: what every other must match
    std::vector<int64_t> dims;
    std::vector<double> params;  // the first push's hyperparameters (PS mode)
    int first_sender = -1;
    std::vector<bool> arrived;
    std::vector<bool> answered;
    std::vector<double> received_us;  // per worker, when its push has kFlagTimed
    int num_arrived = 0;
    zmq::message_t sum;
    bool has_data = false;
    std::vector<zmq::message_t> rows;  // sparse: each worker's [ids][rows], by rank
    Status error;
    Clock::time_point started;
  };

  void Answer(const RoundId& id, Round& round, std::vector<Outgoing>* out);
  // Completes a PS-mode round: initialises or updates the parameter; the reply payload.
  Status FinishPsRound(const RoundId& id, Round& round, zmq::message_t* reply);
  // Completes a sparse apply round; the reply payload holds `*num_rows` rows.
  Status FinishSparseRound(const RoundId& id, Round& round, zmq::message_t* reply,
                           uint64_t* num_rows);
  // The parameter an apply round updates, its slots created at its first update.
  Status ParamToUpdate(const RoundId& id, const Round& round, Param** param);
  void CountUpdate(Param& param);
  void Fail(Round& round, const Status& status, std::vector<Outgoing>* out);
  std::string Where(const RoundId& id) const;
  Outgoing ErrorReply(const Header& about, int rank, const Status& status) const;

  const int num_workers_;
  const int server_id_;
  const double timeout_s_;
  std::map<RoundId, Round> rounds_;
  std::map<int, std::string> lost_;  // rank -> why
  ShardParams params_;
  std::map<uint64_t, size_t> update_counts_;     // updates -> parameters with that many (> 0)
  std::pair<uint64_t, size_t> checkpointed_{0, 0};  // that state at the last checkpoint
};

}  // namespace tfps

#endif  // TFPS_PS_SERVER_KEY_STORE_H_

// PS mode's parameters on one summation thread: values, optimizer slots and update counts,
// what a server checkpoint holds (ps_server/checkpoint.h). A completed summation round
// (sum_rounds.h) either initialises a parameter (kFlagPsInit: root's value, unless one is
// held; kFlagPsOverwrite replaces it and drops the slots) or updates it with the summed
// gradient (kFlagPsApply), dense or by rows (kFlagSparse: each worker's rows summed per row
// id in rank order, only those rows updated and answered). An init round with kFlagPsSlot
// reads or writes the optimizer slots instead (Slot). Owned by one thread: no locks.
#ifndef TFPS_PS_SERVER_PARAMETER_STORE_H_
#define TFPS_PS_SERVER_PARAMETER_STORE_H_

#include <cstdint>
#include <map>
#include <utility>

#include "ps_server/buffer.h"
#include "ps_server/checkpoint.h"
#include "ps_server/sum_rounds.h"
#include "tf_ps_ops/cc/common/status.h"

namespace tfps {

class ParameterStore {
 public:
  ParameterStore(int num_workers, int server_id);

  // Each answers the parameter's new value (a snapshot: it changes again next step while
  // replies may still be queued); the sparse update answers [ids][rows] of `*num_rows` rows.
  Status Init(const Round& round, Buffer* reply);
  Status Apply(const Round& round, Buffer* reply);
  Status ApplySparse(const Round& round, Buffer* reply, uint64_t* num_rows);

  size_t size() const { return params_.size(); }
  // The parameters held, with their update counts.
  const ShardParams& params() const { return params_; }
  // Replaces every parameter (a checkpoint read back, before serving).
  void Restore(ShardParams params);
  // True when every parameter updated so far has the same update count, a multiple of
  // `every` (> 0), and this state (count, number of such parameters) is not yet written.
  bool CheckpointDue(uint64_t every) const;
  void MarkCheckpointed();

 private:
  // kFlagPsSlot (wire/message.h): answers slot k (k = -1: the optimizer's code), or sets it.
  Status Slot(const Round& round, ShardParam& param, Buffer* reply);
  // The parameter an apply round updates, its slots created at its first update.
  Status ToUpdate(const Round& round, ShardParam** param);
  void CountUpdate(ShardParam& param);

  const int num_workers_;
  const int server_id_;
  ShardParams params_;
  std::map<uint64_t, size_t> update_counts_;        // updates -> parameters with that many (> 0)
  std::pair<uint64_t, size_t> checkpointed_{0, 0};  // that state at the last checkpoint
};

}  // namespace tfps

#endif  // TFPS_PS_SERVER_PARAMETER_STORE_H_

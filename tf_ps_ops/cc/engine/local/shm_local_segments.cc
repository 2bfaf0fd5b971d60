// ShmLocalReduce's segments (shm_local_reduce.h): its own per tensor name, the peers' it
// maps, whether a peer's fits a call and whether the peer's process is still alive, and
// unlinking them all at shutdown.
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "tf_ps_ops/cc/engine/local/shm_local_reduce.h"

namespace tfps {

std::string ShmLocalReduce::SegmentName(uint64_t key, int local_rank) const {
  char key_hex[17];
  std::snprintf(key_hex, sizeof(key_hex), "%016llx", static_cast<unsigned long long>(key));
  return "/tfps-" + token_ + "-" + key_hex + "-" + std::to_string(local_rank);
}

Status ShmLocalReduce::OwnOnPoll(const LocalTensor& t, ShmSegment** own) {
  Segments& segs = segments_[t.key];
  const uint64_t bytes = t.count * DTypeSize(t.dtype);
  uint64_t acked = 0;
  uint64_t answered = 0;  // the leader's last answer, which a member re-aligns to after a join
  segs.name = t.name;
  if (segs.own && !Fits(*segs.own, t) && !t.abort) {  // an abort fits any segment
    // The name's shape changed (e.g. the Horovod shim's one name for every eager call):
    // a new segment under the same name, which peers re-open when they see this mark.
    // Its peers are done with the old one (the caller finished the name's last step).
    acked = segs.own->header()->ack_step.load(std::memory_order_acquire);
    answered = segs.own->header()->result_step.load(std::memory_order_acquire);
    segs.own->header()->superseded.store(1, std::memory_order_release);
    segs.own->Unlink();
    segs.own.reset();
  }
  if (!segs.own) {
    ShmSegment* created = nullptr;
    TFPS_RETURN_IF_ERROR(ShmSegment::Create(SegmentName(t.key, local_rank_), bytes,
                                            static_cast<uint32_t>(t.dtype), local_rank_,
                                            &created));
    created->header()->ack_step.store(acked, std::memory_order_release);
    created->header()->result_step.store(answered, std::memory_order_release);
    segs.own.reset(created);
    segs.peers.resize(ranks_.size());
  }
  *own = segs.own.get();
  return Status::Ok();
}

Status ShmLocalReduce::AbortStatus(int local_rank, const std::string& reason) const {
  // The words of the servers' abort (sum_rounds.cc), which callers match.
  return FailedPrecondition("worker " + std::to_string(ranks_[local_rank]) +
                            " could not take part in this collective: " + reason +
                            " (local rank " + std::to_string(local_rank) +
                            ", hierarchical aggregation); the next collective can proceed");
}

bool ShmLocalReduce::Fits(const ShmSegment& segment, const LocalTensor& t) {
  return segment.capacity() == t.count * DTypeSize(t.dtype) &&
         segment.header()->dtype == static_cast<uint32_t>(t.dtype);
}

Status ShmLocalReduce::ShapeMismatch(const ShmSegment& peer, int local_rank,
                                     const LocalTensor& t) const {
  // FailedPrecondition, as the servers report workers that disagree (and Horovod does).
  const uint32_t dtype = peer.header()->dtype;
  if (dtype != static_cast<uint32_t>(t.dtype)) {
    return FailedPrecondition(Describe(local_rank) + " has tensor '" + t.name + "' as " +
                           DTypeName(static_cast<DType>(dtype)) + ", this worker as " +
                           DTypeName(t.dtype) + " (call " + std::to_string(t.step) + ")");
  }
  return FailedPrecondition(Describe(local_rank) + ", tensor '" + t.name + "' (call " +
                         std::to_string(t.step) + "): its tensor has " +
                         std::to_string(peer.capacity()) + " bytes, this worker's " +
                         std::to_string(t.count * DTypeSize(t.dtype)) +
                         ": do the local workers disagree on the tensor's shape or dtype?");
}

Status ShmLocalReduce::PeerOnPoll(const LocalTensor& t, int local_rank, ShmSegment** peer) {
  Segments& segs = segments_[t.key];
  segs.peers.resize(ranks_.size());
  std::unique_ptr<ShmSegment>& slot = segs.peers[local_rank];
  if (slot && slot->header()->superseded.load(std::memory_order_acquire) != 0) {
    slot.reset();  // its owner made a new one for another shape, under the same name
  }
  if (!slot) {
    ShmSegment* opened = nullptr;
    Status s = ShmSegment::Open(SegmentName(t.key, local_rank), kShmAnySize, &opened);
    if (!s.ok()) {
      return s.WithPrefix(Describe(local_rank) + ", tensor '" + t.name + "' (hierarchical "
                          "aggregation; TFPS_HIERARCHICAL=0 turns it off): ");
    }
    if (opened == nullptr) {
      *peer = nullptr;
      return Status::Ok();
    }
    slot.reset(opened);
    if (local_rank_ == 0) {
      slot->Unlink();  // the leader is a member segment's only reader
    } else if (slot->header()->attached.fetch_add(1, std::memory_order_acq_rel) + 2 >=
               ranks_.size()) {
      slot->Unlink();  // the last member to map the leader's segment: no one else needs it
    }
  }
  // Possibly still of an earlier call's shape: the callers tell a peer that has not got
  // to this call yet from one that disagrees (Fits, ShapeMismatch).
  *peer = slot.get();
  return Status::Ok();
}

namespace {

// Gone, or a zombie its parent has not reaped yet (kill(pid, 0) still succeeds on those).
bool ProcessGone(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char buffer[512];
  const size_t n = std::fread(buffer, 1, sizeof(buffer) - 1, f);
  std::fclose(f);
  buffer[n] = '\0';
  const char* paren = std::strrchr(buffer, ')');  // "pid (comm) S ...": comm may hold spaces
  return paren != nullptr && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

}  // namespace

Status ShmLocalReduce::PeerAlive(const ShmSegment& peer, int local_rank,
                                 const LocalTensor& t) const {
  if (!check_liveness_) return Status::Ok();
  const pid_t pid = peer.header()->pid;
  if (!ProcessGone(pid)) return Status::Ok();
  return Unavailable(Describe(local_rank) + " (pid " + std::to_string(pid) +
                     ") exited during call " + std::to_string(t.step) + " of '" + t.name +
                     "' (hierarchical aggregation): the local step cannot complete");
}

void ShmLocalReduce::UnlinkAllOnPoll() {
  // Ours, and every peer's we could know of: a local worker that crashed left its own.
  for (auto& kv : segments_) {
    if (kv.second.own) kv.second.own->Unlink();
    for (int lr = 0; lr < local_size(); ++lr) {
      if (lr != local_rank_) UnlinkShm(SegmentName(kv.first, lr));
    }
  }
  segments_.clear();
}

}  // namespace tfps

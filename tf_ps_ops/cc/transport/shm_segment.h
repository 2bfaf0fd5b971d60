// One shared-memory segment of hierarchical aggregation or of the colocated server
// (TFPS_SHM_SERVER): a header that the local workers use to hand steps over, then the bytes
// of one tensor (shm_local_reduce.h says who writes what).
//
// The bytes live in a memfd sealed against shrinking and growing (F_SEAL_SHRINK |
// F_SEAL_GROW | F_SEAL_SEAL) before anyone else can map it: a process that maps a peer's
// segment can never die of SIGBUS because the peer truncated it under the mapping. The
// POSIX shm name (/dev/shm/<name>, created O_EXCL with mode 0600) holds only where the
// memfd is: "tfps-memfd <pid> <fd> <inode>\n"; an opener reaches it through
// /proc/<pid>/fd/<fd> (same user: the kernel's ptrace-read check), checks inode, owner,
// seals and size, and refuses anything unsealed, so a segment planted by another user, a
// plain file (the format before sealing), or one still being set up is never mapped.
#ifndef TFPS_CC_TRANSPORT_SHM_SEGMENT_H_
#define TFPS_CC_TRANSPORT_SHM_SEGMENT_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "tf_ps_ops/cc/common/status.h"

namespace tfps {

struct ShmHeader {
  std::atomic<uint64_t> magic;  // kShmMagic once the creator has filled the header in
  uint64_t bytes;               // of the tensor that follows
  uint32_t dtype;
  int32_t pid;                  // the creator's, to tell a dead peer from a slow one
  int32_t local_rank;
  std::atomic<uint32_t> attached;       // leader's segment: members that have it mapped
  std::atomic<uint64_t> ready_step;     // member: its input of this step is in place
  std::atomic<uint64_t> ack_step;       // member: it copied the answer of this step
  std::atomic<uint64_t> result_step;    // leader: the answer (or error) of this step is there
  std::atomic<uint32_t> result_code;    // leader: Code of result_step; 0 when ok
  std::atomic<uint32_t> superseded;     // 1: its creator replaced it (another shape): re-open
  std::atomic<uint64_t> aborted_step;   // member: its step of this number is an abort, the
                                        // reason in `error` (set before ready_step)
  std::atomic<uint64_t> shape_digest;   // member: LocalTensor::shape_digest of its input
  char error[400];                      // leader: the error's text, NUL-terminated
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "atomics in shared memory");
constexpr uint64_t kShmMagic = 0x31424d4853535046ull;  // "FPSSHMB1"
constexpr size_t kShmDataOffset = 512;
constexpr uint64_t kShmAnySize = ~uint64_t{0};
static_assert(sizeof(ShmHeader) <= kShmDataOffset, "the header fits before the data");

class ShmSegment {
 public:
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Creates and maps a segment for `bytes` of data; the header filled in, steps at 0.
  // `purpose` and `off` name the feature and the setting that turns it off, in errors.
  static Status Create(const std::string& name, uint64_t bytes, uint32_t dtype, int local_rank,
                       ShmSegment** out, const char* purpose = "hierarchical aggregation",
                       const char* off = "TFPS_HIERARCHICAL=0");
  // Maps an existing one. *out stays nullptr (and Ok) while it does not exist or is not
  // set up yet; an error when it exists but is not what it must be. `bytes` kShmAnySize:
  // any size whose header agrees with the file's (capacity() tells which).
  static Status Open(const std::string& name, uint64_t bytes, ShmSegment** out);

  // Removes the name (mappings stay valid); once, and ENOENT is fine (someone else did).
  void Unlink();

  ShmHeader* header() const { return static_cast<ShmHeader*>(base_); }
  char* data() const { return static_cast<char*>(base_) + kShmDataOffset; }
  // The data bytes this process mapped: unlike header()->bytes, no peer can change it.
  uint64_t capacity() const { return size_ - kShmDataOffset; }
  const std::string& name() const { return name_; }
  // The creator's memfd, which openers reach through /proc/<pid>/fd: closed once no one
  // needs to open the segment any more (the mapping stays). Unlink closes it too.
  void CloseFd();

 private:
  ShmSegment(std::string name, void* base, size_t size, int fd)
      : name_(std::move(name)), base_(base), size_(size), fd_(fd) {}
  std::string name_;
  void* base_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;  // the creator's memfd; -1 in an opener
  bool linked_ = true;
};

// Unlinks `name` if it exists; for cleanup of segments this process did not map.
void UnlinkShm(const std::string& name);

// 128 bits from the kernel's random source, as 32 hex digits: what makes names unguessable.
Status NewShmToken(std::string* token);
bool IsShmToken(const std::string& text);

// TFPS_SHM_SERVER's probe (ps_server/shm_peers.h): the segment a server creates for a
// worker's hello, holding a nonce of kShmProbeBytes (32 hex digits) the worker must read.
constexpr uint64_t kShmProbeBytes = 32;
inline std::string ShmProbeName(const std::string& token) { return "/tfps-q" + token; }
// A worker's side of it: true and *token set when the hello reply `offer` offers shared
// memory and, if it names a probe, the probe is there with its nonce (then unlinked);
// false with *why (empty when nothing was offered) otherwise. A reply of a server before
// the probe ("shm=<token>" alone) is taken as it was.
bool AcceptShmOffer(const std::string& offer, std::string* token, std::string* why);

}  // namespace tfps

#endif  // TFPS_CC_TRANSPORT_SHM_SEGMENT_H_

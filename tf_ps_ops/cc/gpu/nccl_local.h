// Intra-host reduction with NCCL for the hierarchical path (docs/gpu.md): the workers of one
// host (one per GPU) sum their gradient on the GPUs, the leader (local rank 0) alone talks to
// the servers, then the leader broadcasts the servers' answer back. CUDA builds only.
//
// The communicator is made from a 128-byte unique id that the leader creates and every
// local worker receives through our rendezvous (the hookup into the hierarchical path is
// the caller's: it only has to move NewUniqueId's bytes to the other local workers).
//
// NCCL is opened at run time (dlopen), not linked: the op library loads on machines without
// NCCL, and either the pip wheel of nvidia-nccl-cu12 / -cu13 or a system libnccl.so.2 will
// do. Only NCCL's stable C functions are used, declared here from its documented ABI.
//
// Bit-identity across replicas does not depend on NCCL's summation order: only the leader's
// reduced buffer is pushed, and every worker ends with the servers' answer, broadcast as
// bytes.
//
// Nothing waits without a bound: forming the communicator and each collective take a
// timeout; past it the communicator is aborted and the error names the local rank.
#ifndef TFPS_CC_GPU_NCCL_LOCAL_H_
#define TFPS_CC_GPU_NCCL_LOCAL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "tf_ps_ops/cc/common/status.h"

namespace tfps {
namespace gpu {

// Element types NCCL sums (the values are NCCL's ncclDataType_t).
enum class NcclType : int {
  kInt8 = 0, kUInt8 = 1, kInt32 = 2, kUInt32 = 3, kInt64 = 4, kUInt64 = 5,
  kFloat16 = 6, kFloat32 = 7, kFloat64 = 8, kBFloat16 = 9,
};

constexpr size_t kNcclUniqueIdBytes = 128;

class NcclLocalGroup {
 public:
  // Opens NCCL: `library` if not empty (a path to libnccl.so.2), else the dynamic linker's
  // search path. Idempotent; an error says where it looked and what to install.
  static Status Load(const std::string& library);
  // NCCL's version as an integer (e.g. 22703), after Load.
  static int Version();

  // The leader's new id, kNcclUniqueIdBytes bytes, to be sent to every local worker.
  static Status NewUniqueId(std::string* id);

  // Joins the communicator of `local_size` workers on GPU `device` (cudaSetDevice's number)
  // as `local_rank`. Every local worker calls it with the same id within `timeout_s`.
  static Status Create(const std::string& id, int local_rank, int local_size, int device,
                       double timeout_s, std::unique_ptr<NcclLocalGroup>* out);
  ~NcclLocalGroup();

  // Sums every worker's send[0, count) into the leader's recv (recv is ignored elsewhere;
  // may equal send), queued on `stream` (a cudaStream_t), then waits for it at most
  // `timeout_s` (0: returns once queued; the caller orders on the stream itself).
  Status ReduceToLeader(const void* send, void* recv, uint64_t count, NcclType type,
                        void* stream, double timeout_s);
  // The leader's buf[0, count) into every worker's buf.
  Status BroadcastFromLeader(void* buf, uint64_t count, NcclType type, void* stream,
                             double timeout_s);

  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

 private:
  NcclLocalGroup(void* comm, int local_rank, int local_size, int device)
      : comm_(comm), local_rank_(local_rank), local_size_(local_size), device_(device) {}
  Status Finish(int result, const char* what, void* stream, double timeout_s);

  void* comm_;  // ncclComm_t
  int local_rank_, local_size_, device_;
};

}  // namespace gpu
}  // namespace tfps

#endif  // TFPS_CC_GPU_NCCL_LOCAL_H_

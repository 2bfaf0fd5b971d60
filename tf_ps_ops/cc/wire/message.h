// The wire protocol, defined here and nowhere else.
//
// Every message is a ZeroMQ multipart message:
//   frame 0: Header (64 bytes, little-endian) followed by `ndims` int64 dims of the
//            whole tensor (push messages) and `nparams` float64 optimizer
//            hyperparameters (PS-mode pushes) — the "head" frame;
//   frame 1: payload (optional): `count` elements of `dtype` (push/reply), UTF-8 text
//            (register/error), sent zero-copy from the tensor's buffer; with a codec
//            (Header::codec != 0) the encoded bytes of `count` float32 elements instead
//            (cc/codec/codec.h, docs/compression.md). A sparse message
//            (kFlagSparse) carries `count` rows instead: `count` int64 row ids local to the
//            partition, strictly increasing, then those rows (prod(dims[1:]) elements each).
// A batch (kBatch, "fusion") is several push or reply messages in one: frame 0 is a head
// frame of type kBatch whose `count` says how many (1..kMaxBatch), then each message's head
// frame and payload frame (empty when it has none), so 1 + 2 * count frames in all. The
// receiver treats every message in it as if it had come alone; nothing else changes.
// Both ends check `version` on every message; every field is validated by DecodeHead()
// before anything else looks at it.
#ifndef TFPS_CC_WIRE_MESSAGE_H_
#define TFPS_CC_WIRE_MESSAGE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tf_ps_ops/cc/common/status.h"
#include "tf_ps_ops/cc/wire/optimizer_spec.h"

namespace tfps {

constexpr uint32_t kMagic = 0x53504654;  // "TFPS" read as little-endian bytes
// 2: batches, timed replies, acknowledgements; 3: compressed payloads (Header::codec);
// 4: kFlagBroadcast (consistency models; it carries the root of a summation broadcast),
//    hierarchical pushes (kFlagHierarchical), compressed PS-mode pushes (kFlagPsApply with a
//    codec; the reply is float32), uint16/int16/bool, Header::reduce_op, kFlagAbort,
//    member notices (kMemberNotice), servers say goodbye to the scheduler
// 5: application heartbeats (kPing / kPong: a member's serving thread answers the scheduler),
//    a batch to a server may hold kPushPullShm heads (TFPS_SHM_SERVER), process sets
//    (kFlagProcessSet: a push lists the members of its set, Head::members), join (kJoin),
//    kFlagAbortRound (a worker that raised before a collective still takes its call number),
//    join under hierarchical aggregation (kJoin with kFlagJoinLeads / kFlagJoinRelease)
constexpr uint16_t kProtocolVersion = 5;
constexpr int kMaxDims = 32;
constexpr uint32_t kMaxPartitions = 1u << 24;
constexpr uint64_t kMaxElements = uint64_t{1} << 40;

enum class DType : uint8_t {
  kInvalid = 0,
  kFloat16 = 1,
  kBFloat16 = 2,
  kFloat32 = 3,
  kFloat64 = 4,
  kInt8 = 5,
  kUInt8 = 6,
  kInt32 = 7,
  kInt64 = 8,
  kUInt16 = 9,
  kInt16 = 10,
  kBool = 11,  // one byte, 0 or 1; summed as logical or (Horovod's bool allreduce)
};

// How the servers combine the pushes of a summation round (Header::reduce_op). Average is
// a sum that the worker divides; Horovod's Adasum is not a server reduction.
enum class ReduceOp : uint8_t {
  kSum = 0,
  kMin = 1,
  kMax = 2,
  kProduct = 3,
};
constexpr uint8_t kMaxReduceOp = 3;
const char* ReduceOpName(ReduceOp op);  // "sum", "min", ...; "invalid" otherwise

size_t DTypeSize(DType dtype);  // 0 for kInvalid and unknown values
const char* DTypeName(DType dtype);
// The DType of a buffer element of `kind` ('f' float, 'i' signed, 'u' unsigned integer, as
// NumPy's dtype.kind) and `size` bytes; kInvalid when the wire has none (the bindings).
DType DTypeOfElement(char kind, size_t size);

// The message types, listed once: the enum, kMaxMsgType, MsgTypeTable() and through it the
// Python binding's MSG_TYPES all come from this list. Values run 1..kMaxMsgType in order.
//   X(enumerator, value, Python name, what it is)
#define TFPS_MSG_TYPES(X)                                                                     \
  X(kRegister, 1, "REGISTER", "any role -> scheduler; payload: key=value text")               \
  X(kRegisterReply, 2, "REGISTER_REPLY", "scheduler -> registrant; payload: the cluster")     \
  X(kHello, 3, "HELLO", "worker -> server on connect (version check)")                        \
  X(kHelloReply, 4, "HELLO_REPLY", "server -> worker: the hello is accepted")                 \
  X(kPushPull, 5, "PUSH_PULL", "worker -> server: one partition of a tensor for one step")    \
  X(kPushPullReply, 6, "PUSH_PULL_REPLY", "server -> worker: the sum over all workers")       \
  X(kError, 7, "ERROR", "a reply carrying `status` and, optionally, UTF-8 text as payload")   \
  X(kBye, 8, "BYE", "worker -> server/scheduler, server -> scheduler: clean shutdown")       \
  X(kPeerData, 9, "PEER_DATA", "worker -> worker: its part of an allgather (SFB factors)")    \
  X(kBatch, 10, "BATCH", "several kPushPull (worker -> server) or replies (server -> worker)") \
  X(kAck, 11, "ACK", "server -> worker: a kFlagAck push (key, partition, step) arrived")        \
  X(kMemberNotice, 12, "MEMBER_NOTICE",                                                         \
    "member -> scheduler -> every member: why a member fails (status != 0) or a warning "       \
    "(status 0); text payload (cluster/notice.h)")                                              \
  X(kPushPullShm, 13, "PUSH_PULL_SHM",                                                          \
    "worker -> colocated server: a kPushPull whose payload is in shared memory (no frame)")   \
  X(kPushPullReplyShm, 14, "PUSH_PULL_REPLY_SHM",                                               \
    "server -> colocated worker: the answer to a kPushPullShm is in its shared memory")       \
  X(kPing, 15, "PING",                                                                          \
    "scheduler -> member: answer from the thread that serves (application heartbeat; "         \
    "step: a sequence number)")                                                                 \
  X(kPong, 16, "PONG", "member -> scheduler: the answer to a kPing (the same step)")          \
  X(kJoin, 17, "JOIN",                                                                          \
    "worker -> every server: hvd.join(), one partition per server, int32[1] = its rank; "      \
    "answered (kPushPullReply, int32[1]: the last rank to join) once every worker joined")

enum class MsgType : uint16_t {
#define TFPS_MSG_TYPE_ENUMERATOR(enumerator, value, name, doc) enumerator = value,
  TFPS_MSG_TYPES(TFPS_MSG_TYPE_ENUMERATOR)
#undef TFPS_MSG_TYPE_ENUMERATOR
};

struct MsgTypeInfo {
  MsgType type;
  const char* name;  // as Python sees it: "PUSH_PULL"
  const char* doc;
};
inline constexpr MsgTypeInfo kMsgTypeTable[] = {
#define TFPS_MSG_TYPE_INFO(enumerator, value, name, doc) {MsgType::enumerator, name, doc},
    TFPS_MSG_TYPES(TFPS_MSG_TYPE_INFO)
#undef TFPS_MSG_TYPE_INFO
};
constexpr uint16_t kMaxMsgType = sizeof(kMsgTypeTable) / sizeof(kMsgTypeTable[0]);

// DecodeHead accepts exactly 1..kMaxMsgType, so the list may have no gap.
constexpr bool MsgTypesAreDense() {
  for (uint16_t i = 0; i < kMaxMsgType; ++i) {
    if (static_cast<uint16_t>(kMsgTypeTable[i].type) != i + 1) return false;
  }
  return true;
}
static_assert(MsgTypesAreDense(), "TFPS_MSG_TYPES must number its types 1, 2, 3, ...");

constexpr uint64_t kMaxBatch = 4096;  // messages in one batch

// Header flags.
constexpr uint32_t kFlagNoData = 1u << 0;   // push counted, contributes nothing (broadcast)
constexpr uint32_t kFlagPsInit = 1u << 1;   // PS mode: the sum (root's data) initialises the
                                            // server's parameter unless it already holds one;
                                            // every worker gets the parameter held
constexpr uint32_t kFlagPsApply = 1u << 2;  // PS mode: payload is a gradient; the server
                                            // averages, applies `optimizer`, answers parameters
constexpr uint32_t kFlagPsOverwrite = 1u << 3;  // PS mode, only with kFlagPsInit: the root's
                                                // data replaces the parameter held (a restore)
                                                // and resets its optimizer slots
constexpr uint32_t kFlagSparse = 1u << 4;  // PS mode: `count` rows [ids][values] (see above);
                                           // a push also has kFlagPsApply; dims always travel
constexpr uint32_t kFlagTimed = 1u << 5;   // push: stamp the reply (TFPS_TIMELINE); reply:
                                           // params = {push received, answer ready}, the
                                           // server's wall clock in microseconds
constexpr uint32_t kFlagAck = 1u << 6;     // push: acknowledge it (kAck) as soon as it
                                           // arrives; the scheduling credit counts a
                                           // partition until then, not until the sum, so
                                           // workers never wait on each other's credit
constexpr uint32_t kFlagNoFeedback = 1u << 7;  // compressed push (codec != 0): the worker
                                              // keeps no error feedback, so the server keeps
                                              // none when it re-encodes the sum either
constexpr uint32_t kFlagBroadcast = 1u << 8;  // push: part of a broadcast (every worker's,
                                             // the root's too): under ssp/asp it stays a bsp
                                             // round (docs/consistency.md). A summation
                                             // broadcast (no PS flag) carries params =
                                             // {root rank}: every worker must name the same
                                             // root (a mismatch fails the round)
constexpr uint32_t kFlagProcessSet = 1u << 9;  // summation push of a Horovod process set:
                                              // after the params, the head frame carries
                                              // uint32 n and then n int32 member ranks,
                                              // strictly increasing (Head::members); the
                                              // round completes when those have pushed
constexpr uint32_t kFlagJoinLeads = 1u << 10;  // kJoin of a local leader whose host's
                                              // other workers still train (hierarchical
                                              // aggregation): the server records its join
                                              // (its place in the join order) and counts it
                                              // as zeros in flat rounds, but not in
                                              // kFlagHierarchical ones, which it still
                                              // pushes for its members
constexpr uint32_t kFlagAbortRound = 1u << 11;  // summation push: the sender cannot take
                                                // part in this call (it raised before the
                                                // op); payload: why, UTF-8 as uint8[length].
                                                // The round fails on every worker at once
                                                // (FailedPrecondition) and the call number
                                                // is used up, so the next call meets
                                                // the next round. Whole in every partition
                                                // (count == total_count); with
                                                // kFlagHierarchical, params = the local
                                                // leader's host's ranks it stands for
constexpr uint32_t kFlagJoinRelease = 1u << 12;  // kJoin of that leader once its members
                                                // have all joined: count it as joined in
                                                // kFlagHierarchical rounds too. Answered at
                                                // once (int32[1]: the sender's rank); one
                                                // without a leading join is refused, one
                                                // after the join completed is ignored
constexpr uint32_t kFlagAbort = 1u << 13;  // peer data: the sender cannot take part in this
                                           // call (its own input was refused); payload: why,
                                           // UTF-8 as uint8[length]. Its peers fail the call
                                           // at once instead of waiting for data
constexpr uint32_t kFlagShmRefused = 1u << 14;  // kError reply to a kPushPullShm: the
                                               // server refused the segment (unsealed,
                                               // not openable, wrong size) and counted
                                               // nothing; the worker sends that partition
                                               // over the socket from then on
constexpr uint32_t kFlagHierarchical = 1u << 15;  // summation push of a local leader
                                                  // (TFPS_HIERARCHICAL): the payload is
                                                  // the sum of its host's workers; params =
                                                  // their ranks (the sender's included),
                                                  // who count as arrived and get no reply
constexpr uint32_t kFlagPsSlot = 1u << 16;  // PS mode, only with kFlagPsInit: the push is about
                                            // the parameter's optimizer slots, params = {k}.
                                            // A read (no kFlagPsOverwrite) answers slot k, or
                                            // for k = -1 the optimizer's code in every
                                            // element (zeros: a slot the partition lacks);
                                            // a write (kFlagPsOverwrite) sets them from the
                                            // root's data (k = -1: the optimizer, its slots
                                            // zeroed). Elastic PS mode keeps the slots of a
                                            // commit this way (tf_ps_ops.elastic)
constexpr uint32_t kKnownFlags = kFlagNoData | kFlagPsInit | kFlagPsApply | kFlagPsOverwrite |
                                 kFlagSparse | kFlagTimed | kFlagAck | kFlagNoFeedback |
                                 kFlagBroadcast | kFlagAbort | kFlagHierarchical |
                                 kFlagProcessSet | kFlagAbortRound | kFlagShmRefused |
                                 kFlagJoinLeads | kFlagJoinRelease | kFlagPsSlot;

// PS-mode hyperparameters (Head::params) of a kFlagPsApply push: the values that
// optimizer_spec.h's table lists for Header::optimizer, in its order, then the initial
// values of the optimizer's slots.
constexpr int kMaxParams = 16;
// Members of a process set in one push (kFlagProcessSet).
constexpr uint32_t kMaxSetMembers = 1u << 16;

#pragma pack(push, 1)
struct Header {
  uint32_t magic = kMagic;
  uint16_t version = kProtocolVersion;
  uint16_t type = 0;            // MsgType
  uint64_t key = 0;             // hash of the tensor name
  uint32_t partition = 0;
  uint32_t num_partitions = 0;
  uint64_t step = 0;            // per-key call count, 1-based
  uint8_t dtype = 0;            // DType
  uint8_t ndims = 0;            // dims that follow the header in the head frame
  uint8_t optimizer = 0;        // Optimizer of a kFlagPsApply push (optimizer_spec.h)
  uint8_t nparams = 0;          // float64 hyperparameters that follow the dims
  uint32_t flags = 0;
  int32_t sender = -1;          // worker rank, server id, -1 for the scheduler
  uint16_t status = 0;          // Code of a kError reply
  uint8_t codec = 0;            // CodecId of a push/reply payload (cc/codec/codec.h); 0: none
  uint8_t reduce_op = 0;        // ReduceOp of a summation push and its reply; 0: sum
  uint64_t count = 0;           // elements in this message's payload (or that it stands for);
                                // rows with kFlagSparse
  uint64_t total_count = 0;     // elements in the whole tensor
};
#pragma pack(pop)
static_assert(sizeof(Header) == 64, "the header is 64 bytes on the wire");

struct Head {
  Header header;
  std::vector<int64_t> dims;  // shape of the whole tensor (push only)
  std::vector<double> params;  // optimizer hyperparameters (PS-mode push only)
  std::vector<int32_t> members;  // kFlagProcessSet: the set's ranks, strictly increasing
};

// A push or reply whose payload travels through shared memory (colocated worker and
// server, TFPS_SHM_SERVER) is the kPushPull / kPushPullReply it stands for in every field
// but the type, and has no payload frame: DecodeHead checks it as that message with the
// payload it stands for (dense, uncompressed only), CheckMessageSize likewise.
MsgType BaseType(MsgType type);  // kPushPullShm -> kPushPull, ...; others unchanged

// Serialises a head frame.
std::string EncodeHead(const Head& head);

// Parses and validates a head frame together with the size of the payload frame that came
// with it. Checks magic, version, type, flags, dtype, counts against the payload size and
// partition bounds; on failure nothing in *head is to be trusted.
Status DecodeHead(const void* data, size_t size, size_t payload_size, Head* head);

// Checks that the bytes a decoded head stands for fit in `max_bytes`
// (TFPS_MAX_MESSAGE_BYTES): count x element size of a tensor message, whether or not it
// carries the payload (a kFlagNoData push makes the receiver allocate them). Call it after
// DecodeHead and before anything is allocated from the head. (Sparse messages: their
// payload, checked exactly by DecodeHead, is all they stand for.)
Status CheckMessageSize(const Header& header, uint64_t max_bytes);

// Whether a head frame says kBatch (read before the frame is decoded, to pick the path).
bool IsBatchHead(const void* data, size_t size);
// Checks a batch head (decoded by DecodeHead) against the number of frames that followed it.
Status CheckBatch(const Header& batch, size_t frames_after_head);

// A head of `type` from `sender` about the push `about`: its key, partition and step, by
// which the worker finds the request (acknowledgements, error replies).
Head HeadAbout(const Header& about, MsgType type, int32_t sender);

// Wall-clock microseconds since the epoch: the unit of timed replies.
double WallMicros();

// Elements per row of a tensor of shape `dims` (prod(dims[1:]); 1 for rank <= 1): the unit
// of sparse messages and of PS-mode partition boundaries.
uint64_t RowElements(const std::vector<int64_t>& dims);

// "float32[2,3]" — for error messages.
std::string DescribeTensor(DType dtype, const std::vector<int64_t>& dims);

// FNV-1a 64-bit of a tensor name: the key on the wire, identical on every worker.
uint64_t KeyOfName(const std::string& name);

}  // namespace tfps

#endif  // TFPS_CC_WIRE_MESSAGE_H_

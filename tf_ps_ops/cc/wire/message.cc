#include "tf_ps_ops/cc/wire/message.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstddef>
#include <cstring>

#include "tf_ps_ops/cc/codec/codec.h"

namespace tfps {


size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
    case DType::kFloat32:
    case DType::kInt32: return 4;
    case DType::kFloat64:
    case DType::kInt64: return 8;
    case DType::kUInt16:
    case DType::kInt16: return 2;
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool: return 1;
    default: return 0;
  }
}

DType DTypeOfElement(char kind, size_t size) {
  if (kind == 'f' && size == 2) return DType::kFloat16;
  if (kind == 'f' && size == 4) return DType::kFloat32;
  if (kind == 'f' && size == 8) return DType::kFloat64;
  if (kind == 'i' && size == 1) return DType::kInt8;
  if (kind == 'u' && size == 1) return DType::kUInt8;
  if (kind == 'i' && size == 4) return DType::kInt32;
  if (kind == 'i' && size == 8) return DType::kInt64;
  if (kind == 'u' && size == 2) return DType::kUInt16;
  if (kind == 'i' && size == 2) return DType::kInt16;
  if (kind == 'b' && size == 1) return DType::kBool;
  return DType::kInvalid;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt16: return "uint16";
    case DType::kInt16: return "int16";
    case DType::kBool: return "bool";
    default: return "invalid";
  }
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
    default: return "invalid";
  }
}

std::string EncodeHead(const Head& head) {
  Header h = head.header;
  h.ndims = static_cast<uint8_t>(head.dims.size());
  h.nparams = static_cast<uint8_t>(head.params.size());
  const size_t dims_bytes = head.dims.size() * sizeof(int64_t);
  const size_t params_bytes = head.params.size() * sizeof(double);
  // The member list travels exactly when the flag says so (DecodeHead checks both ways).
  const bool set = (h.flags & kFlagProcessSet) != 0;
  const size_t set_bytes = set ? sizeof(uint32_t) + head.members.size() * sizeof(int32_t) : 0;
  std::string out(sizeof(Header) + dims_bytes + params_bytes + set_bytes, '\0');
  std::memcpy(&out[0], &h, sizeof(Header));
  if (!head.dims.empty()) std::memcpy(&out[sizeof(Header)], head.dims.data(), dims_bytes);
  if (!head.params.empty()) {
    std::memcpy(&out[sizeof(Header) + dims_bytes], head.params.data(), params_bytes);
  }
  if (set) {
    const uint32_t n = static_cast<uint32_t>(head.members.size());
    char* at = &out[sizeof(Header) + dims_bytes + params_bytes];
    std::memcpy(at, &n, sizeof(n));
    if (n > 0) std::memcpy(at + sizeof(n), head.members.data(), n * sizeof(int32_t));
  }
  return out;
}

namespace {

// "0x1f": flags are a bit set, readable only in hexadecimal.
std::string Hex(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%x", value);
  return text;
}

bool CarriesTensor(MsgType type) {
  return type == MsgType::kPushPull || type == MsgType::kPushPullReply ||
         type == MsgType::kPeerData || type == MsgType::kJoin;
}

Status CheckShape(const Head& head) {
  const Header& h = head.header;
  uint64_t product = 1;
  for (int64_t d : head.dims) {
    if (d < 0 || (d > 0 && product > kMaxElements / static_cast<uint64_t>(d))) {
      return InvalidArgument("tensor dimension " + std::to_string(d) + " is out of range");
    }
    product *= static_cast<uint64_t>(d);
  }
  if (product != h.total_count) {
    return InvalidArgument("shape " + DescribeTensor(static_cast<DType>(h.dtype), head.dims) +
                           " does not hold " + std::to_string(h.total_count) + " elements");
  }
  return Status::Ok();
}

// A sparse message: `count` rows of the shape's row size, as [int64 ids][rows]. Pushes
// and replies both carry the shape, so the row size is known before the payload is read.
Status CheckSparseFields(const Head& head, size_t payload_size, size_t elem) {
  const Header& h = head.header;
  const auto type = static_cast<MsgType>(h.type);
  if (type != MsgType::kPushPull && type != MsgType::kPushPullReply) {
    return InvalidArgument("only push and reply messages can be sparse");
  }
  if (type == MsgType::kPushPull && (h.flags & kFlagPsApply) == 0) {
    return InvalidArgument("a sparse push must be a PS apply push");
  }
  if (head.dims.empty()) return InvalidArgument("a sparse message must carry its shape");
  TFPS_RETURN_IF_ERROR(CheckShape(head));
  const uint64_t row = RowElements(head.dims);
  if (row == 0 || h.count > static_cast<uint64_t>(head.dims[0])) {
    return InvalidArgument(std::to_string(h.count) + " sparse rows do not fit shape " +
                           DescribeTensor(static_cast<DType>(h.dtype), head.dims));
  }
  const uint64_t expected = h.count * (sizeof(int64_t) + row * elem);
  if (payload_size != expected) {
    return InvalidArgument("payload has " + std::to_string(payload_size) + " bytes, header says " +
                           std::to_string(expected) + " (" + std::to_string(h.count) +
                           " rows of " + std::to_string(row) + " x " +
                           DTypeName(static_cast<DType>(h.dtype)) + " with their ids)");
  }
  return Status::Ok();
}

Status CheckTensorFields(const Head& head, size_t payload_size) {
  const Header& h = head.header;
  const DType dtype = static_cast<DType>(h.dtype);
  const size_t elem = DTypeSize(dtype);
  if (elem == 0) return InvalidArgument("unknown dtype code " + std::to_string(h.dtype));
  if (h.num_partitions == 0 || h.num_partitions > kMaxPartitions ||
      h.partition >= h.num_partitions) {
    return InvalidArgument("partition " + std::to_string(h.partition) + " of " +
                           std::to_string(h.num_partitions) + " is out of range");
  }
  if (h.count > kMaxElements || h.total_count > kMaxElements || h.count > h.total_count) {
    return InvalidArgument("element count " + std::to_string(h.count) + " of " +
                           std::to_string(h.total_count) + " is out of range");
  }
  const bool no_data = (h.flags & kFlagNoData) != 0;
  const bool sparse = (h.flags & kFlagSparse) != 0;
  const uint64_t expected = no_data ? 0 : h.count * elem;
  if (sparse) return CheckSparseFields(head, payload_size, elem);
  if (h.codec != 0) {
    uint64_t k = 0;
    TFPS_RETURN_IF_ERROR(CheckEncoded(static_cast<CodecId>(h.codec), h.count, payload_size, &k));
    if (static_cast<MsgType>(h.type) != MsgType::kPushPullReply) return CheckShape(head);
    return Status::Ok();
  }
  if (payload_size != expected) {
    return InvalidArgument("payload has " + std::to_string(payload_size) + " bytes, header says " +
                           std::to_string(expected) + " (" + std::to_string(h.count) + " x " +
                           DTypeName(dtype) + ")");
  }
  if (static_cast<MsgType>(h.type) != MsgType::kPushPullReply) {  // these carry the shape
    return CheckShape(head);
  }
  return Status::Ok();
}

// The reduce op and the broadcast root: summation pushes (and, for the op, their replies)
// only, never with a codec or PS mode; a broadcast root is a whole rank.
Status CheckCollectiveFields(const Head& head) {
  const Header& h = head.header;
  const auto type = static_cast<MsgType>(h.type);
  constexpr uint32_t kNotSummation = kFlagPsInit | kFlagPsApply | kFlagSparse;
  if (h.reduce_op > kMaxReduceOp) {
    return InvalidArgument("unknown reduce op " + std::to_string(h.reduce_op));
  }
  if (h.reduce_op != 0 &&
      ((type != MsgType::kPushPull && type != MsgType::kPushPullReply && type != MsgType::kError) ||
       h.codec != 0 ||
       (h.flags & (kNotSummation | kFlagNoData | kFlagBroadcast | kFlagHierarchical)) != 0)) {
    return InvalidArgument(std::string("reduce op ") +
                           ReduceOpName(static_cast<ReduceOp>(h.reduce_op)) +
                           " on a message that is not a plain summation push or reply (type " +
                           std::to_string(h.type) + ", flags " + Hex(h.flags) + ", codec " +
                           std::to_string(h.codec) + ")");
  }
  if ((h.flags & kFlagAbort) != 0 &&
      (type != MsgType::kPeerData || h.dtype != static_cast<uint8_t>(DType::kUInt8) ||
       h.ndims != 1 || (h.flags & ~kFlagAbort) != 0)) {
    return InvalidArgument("the abort flag is only valid on peer data carrying text");
  }
  if ((h.flags & kFlagAbortRound) != 0) {
    // The push carries the reason as text; a reply or error about it may echo the flag.
    // Every partition of the name gets the whole text; a local leader's (kFlagHierarchical)
    // lists the ranks of its host it stands for.
    constexpr uint32_t kMayAccompany = kFlagAbortRound | kFlagAck | kFlagTimed | kFlagHierarchical;
    const bool push = type == MsgType::kPushPull;
    const bool lists = (h.flags & kFlagHierarchical) != 0;
    if ((!push && type != MsgType::kError && type != MsgType::kAck) ||
        (push && (h.dtype != static_cast<uint8_t>(DType::kUInt8) || h.ndims != 1 ||
                  h.codec != 0 || h.reduce_op != 0 || (h.nparams != 0) != lists ||
                  h.count != h.total_count || (h.flags & ~kMayAccompany) != 0))) {
      return InvalidArgument("the abort-round flag is only valid on a plain push carrying "
                             "text, whole in every partition");
    }
  }
  if ((h.flags & kFlagShmRefused) != 0 && type != MsgType::kError) {
    return InvalidArgument("the shared-memory-refused flag is only valid on an error reply");
  }
  // A PS init push is a broadcast too (kFlagBroadcast keeps it a BSP round); it has rules
  // of its own and carries no root.
  if ((h.flags & kFlagBroadcast) != 0 && (h.flags & kFlagPsInit) == 0) {
    if (type != MsgType::kPushPull || (h.flags & kNotSummation) != 0 || h.codec != 0 ||
        h.nparams != 1) {
      return InvalidArgument("the broadcast flag is only valid on a plain push carrying its "
                             "root rank as its one parameter");
    }
    const double root = head.params[0];
    if (!(root >= 0 && root < 1e9) || root != static_cast<double>(static_cast<int64_t>(root))) {
      return InvalidArgument("broadcast root " + std::to_string(root) + " is not a rank");
    }
  }
  return Status::Ok();
}

}  // namespace

namespace {
Status DecodeHeadAsSent(const void* data, size_t size, size_t payload_size, Head* head);

// The member list of a process-set push, which follows the params: uint32 n, then n int32
// ranks, strictly increasing and >= 0 (whether they are workers, the server checks).
Status DecodeMembers(const void* data, size_t size, size_t fixed, Head* head) {
  const Header& h = head->header;
  if (static_cast<MsgType>(h.type) != MsgType::kPushPull ||
      (h.flags & (kFlagPsInit | kFlagPsApply | kFlagSparse | kFlagHierarchical)) != 0) {
    return InvalidArgument("the process-set flag is only valid on a summation push (flags " +
                           Hex(h.flags) + ")");
  }
  uint32_t n = 0;
  if (size >= fixed + sizeof(n)) std::memcpy(&n, static_cast<const char*>(data) + fixed, sizeof(n));
  if (size < fixed + sizeof(n) || n == 0 || n > kMaxSetMembers ||
      size != fixed + sizeof(n) + uint64_t{n} * sizeof(int32_t)) {
    return InvalidArgument("head frame of " + std::to_string(size) +
                           " bytes does not hold a process set's 1.." +
                           std::to_string(kMaxSetMembers) + " member ranks after " +
                           std::to_string(h.ndims) + " dims and " + std::to_string(h.nparams) +
                           " parameters");
  }
  head->members.resize(n);
  std::memcpy(head->members.data(), static_cast<const char*>(data) + fixed + sizeof(n),
              n * sizeof(int32_t));
  for (uint32_t i = 0; i < n; ++i) {
    if (head->members[i] < 0 || (i > 0 && head->members[i] <= head->members[i - 1])) {
      return InvalidArgument("a process set's member ranks must be >= 0 and strictly "
                             "increasing; got " + std::to_string(head->members[i]) +
                             " at position " + std::to_string(i));
    }
  }
  return Status::Ok();
}
}  // namespace

MsgType BaseType(MsgType type) {
  if (type == MsgType::kPushPullShm) return MsgType::kPushPull;
  if (type == MsgType::kPushPullReplyShm) return MsgType::kPushPullReply;
  return type;
}

Status DecodeHead(const void* data, size_t size, size_t payload_size, Head* head) {
  if (size >= sizeof(Header)) {
    Header h;
    std::memcpy(&h, data, sizeof(Header));
    const auto type = static_cast<MsgType>(h.type);
    if (h.magic == kMagic && h.version == kProtocolVersion && BaseType(type) != type) {
      if (payload_size != 0 || h.codec != 0 || (h.flags & kFlagSparse) != 0) {
        return InvalidArgument("a shared-memory push or reply carries no payload frame and "
                               "is dense and uncompressed");
      }
      const uint64_t elem = DTypeSize(static_cast<DType>(h.dtype));
      const bool no_data = (h.flags & kFlagNoData) != 0;
      // An impossible size for a count out of range: the check below rejects it.
      const uint64_t stands_for = no_data ? 0 : h.count <= kMaxElements ? h.count * elem : 1;
      std::string as_base(static_cast<const char*>(data), size);
      const uint16_t base = static_cast<uint16_t>(BaseType(type));
      std::memcpy(&as_base[offsetof(Header, type)], &base, sizeof(base));
      Status s = DecodeHeadAsSent(as_base.data(), size, stands_for, head);
      head->header.type = h.type;
      if (s.ok() && no_data) s = InvalidArgument("a shared-memory push carries data");
      return s;
    }
  }
  return DecodeHeadAsSent(data, size, payload_size, head);
}

namespace {

// The fixed part of a head frame: the header (magic, version, type, known flags), then
// its dims, parameters and (with the process-set flag) member ranks, which must fill the
// frame exactly. Copies them into *head.
Status ReadHeadFrame(const void* data, size_t size, Head* head) {
  if (size < sizeof(Header)) {
    return InvalidArgument("head frame of " + std::to_string(size) + " bytes is shorter than " +
                           std::to_string(sizeof(Header)));
  }
  std::memcpy(&head->header, data, sizeof(Header));
  head->members.clear();
  const Header& h = head->header;
  if (h.magic != kMagic) return InvalidArgument("bad magic number: not a tf_ps_ops message");
  if (h.version != kProtocolVersion) {
    return FailedPrecondition("protocol version mismatch: peer speaks version " +
                              std::to_string(h.version) + ", this process speaks version " +
                              std::to_string(kProtocolVersion) +
                              "; run the same tf_ps_ops release everywhere");
  }
  if (h.type == 0 || h.type > kMaxMsgType) {
    return InvalidArgument("unknown message type " + std::to_string(h.type));
  }
  if ((h.flags & ~kKnownFlags) != 0) {
    return InvalidArgument("unknown flags " + Hex(h.flags & ~kKnownFlags));
  }
  const size_t fixed = sizeof(Header) + h.ndims * sizeof(int64_t) + h.nparams * sizeof(double);
  if (h.ndims <= kMaxDims && h.nparams <= kMaxParams && (h.flags & kFlagProcessSet) != 0) {
    TFPS_RETURN_IF_ERROR(DecodeMembers(data, size, fixed, head));
  } else if (h.ndims > kMaxDims || h.nparams > kMaxParams || size != fixed) {
    return InvalidArgument("head frame of " + std::to_string(size) + " bytes does not match " +
                           std::to_string(h.ndims) + " dims and " + std::to_string(h.nparams) +
                           " parameters");
  }
  head->dims.resize(h.ndims);
  head->params.resize(h.nparams);
  const char* tail = static_cast<const char*>(data) + sizeof(Header);
  if (h.ndims > 0) std::memcpy(head->dims.data(), tail, h.ndims * sizeof(int64_t));
  if (h.nparams > 0) {
    std::memcpy(head->params.data(), tail + h.ndims * sizeof(int64_t), h.nparams * sizeof(double));
  }
  return Status::Ok();
}

// A PS apply push names a known optimizer and carries its hyperparameters and slot
// initial values.
Status CheckPsApplyFields(const Header& h) {
  if ((h.flags & kFlagPsApply) != 0) {
    const auto opt = static_cast<Optimizer>(h.optimizer);
    if (h.optimizer == 0 || h.optimizer > kMaxOptimizer) {
      return InvalidArgument("unknown optimizer code " + std::to_string(h.optimizer));
    }
    const int expected = OptimizerParamCount(opt) + OptimizerSlotCount(opt);
    if (h.nparams != expected) {
      return InvalidArgument(std::string(OptimizerName(opt)) + " takes " +
                             std::to_string(OptimizerParamCount(opt)) + " hyperparameters and " +
                             std::to_string(OptimizerSlotCount(opt)) +
                             " slot initial values, got " + std::to_string(h.nparams));
    }
    if ((h.flags & (kFlagPsInit | kFlagNoData)) != 0) {
      return InvalidArgument("a PS apply push cannot also be an init or carry no data");
    }
  }
  return Status::Ok();
}

// Which message types the sparse, timed, acknowledgement and PS init/overwrite flags may
// ride on, and what a batch head may carry.
Status CheckFlagsOfType(const Header& h, size_t payload_size) {
  if ((h.flags & kFlagSparse) != 0 && (h.flags & (kFlagPsInit | kFlagNoData)) != 0) {
    return InvalidArgument("a sparse message cannot be an init or carry no data");
  }
  if ((h.flags & kFlagSparse) != 0 && !CarriesTensor(static_cast<MsgType>(h.type))) {
    return InvalidArgument("only push and reply messages can be sparse");
  }
  if ((h.flags & kFlagTimed) != 0) {
    const auto type = static_cast<MsgType>(h.type);
    if (type != MsgType::kPushPull && type != MsgType::kPushPullReply) {
      return InvalidArgument("only pushes and their replies can be timed");
    }
    if (type == MsgType::kPushPullReply && h.nparams != 2) {
      return InvalidArgument("a timed reply carries 2 timestamps, not " +
                             std::to_string(h.nparams));
    }
  }
  if ((h.flags & kFlagAck) != 0 && static_cast<MsgType>(h.type) != MsgType::kPushPull) {
    return InvalidArgument("only pushes can ask for an acknowledgement");
  }
  if (static_cast<MsgType>(h.type) == MsgType::kBatch &&
      (h.count == 0 || h.count > kMaxBatch || h.ndims != 0 || h.nparams != 0 || h.flags != 0 ||
       payload_size != 0)) {
    return InvalidArgument("a batch head must count 1.." + std::to_string(kMaxBatch) +
                           " messages and carry nothing else (count " + std::to_string(h.count) +
                           ")");
  }
  if ((h.flags & kFlagPsOverwrite) != 0 && (h.flags & kFlagPsInit) == 0) {
    return InvalidArgument("the PS overwrite flag is only valid on a PS init push");
  }
  if ((h.flags & kFlagPsSlot) != 0 && (h.flags & kFlagPsInit) == 0) {
    return InvalidArgument("the PS slot flag is only valid on a PS init push");
  }
  const uint8_t init_params = (h.flags & kFlagPsSlot) != 0 ? 1 : 0;  // the slot's index
  if ((h.flags & kFlagPsInit) != 0 && (h.optimizer != 0 || h.nparams != init_params)) {
    return InvalidArgument("a PS init push carries no optimizer, and parameters only as a "
                           "slot push (its slot index)");
  }
  return Status::Ok();
}

// A local leader's push (hierarchical): a dense summation push listing the ranks it sums.
Status CheckHierarchicalFields(const Header& h) {
  if ((h.flags & kFlagHierarchical) != 0) {
    // Which ranks it stands for is checked where the number of workers is known (server).
    if (static_cast<MsgType>(h.type) != MsgType::kPushPull || h.nparams == 0 ||
        (h.flags & (kFlagSparse | kFlagNoData | kFlagPsInit | kFlagPsApply)) != 0) {
      return InvalidArgument("the hierarchical flag is only valid on a dense summation push "
                             "that lists the ranks it sums (flags " + Hex(h.flags) + ", " +
                             std::to_string(h.nparams) + " ranks)");
    }
  }
  return Status::Ok();
}

// The codec and its no-feedback flag: dense float32 pushes and their replies only.
Status CheckCodecFields(const Header& h) {
  if ((h.flags & kFlagNoFeedback) != 0 &&
      (h.codec == 0 || static_cast<MsgType>(h.type) != MsgType::kPushPull)) {
    return InvalidArgument("the no-feedback flag is only valid on a compressed push");
  }
  if (h.codec != 0) {
    // Compression applies to dense float32 pushes (summation or a PS-mode gradient) and
    // to summation replies (a PS reply, the parameter, is float32: the engine checks it).
    const auto type = static_cast<MsgType>(h.type);
    if (h.codec > kMaxCodecId) {
      return InvalidArgument("unknown codec " + std::to_string(h.codec));
    }
    if ((type != MsgType::kPushPull && type != MsgType::kPushPullReply) ||
        h.dtype != static_cast<uint8_t>(DType::kFloat32) ||
        (h.flags & (kFlagSparse | kFlagNoData | kFlagPsInit)) != 0) {
      return InvalidArgument(std::string("codec ") + CodecIdName(static_cast<CodecId>(h.codec)) +
                             " on a message that is not a dense float32 push or its reply "
                             "(type " + std::to_string(h.type) + ", dtype " +
                             DTypeName(static_cast<DType>(h.dtype)) + ", flags " +
                             Hex(h.flags) + ")");
    }
  }
  return Status::Ok();
}

// A join's fixed shape, and its two flags on joins only.
Status CheckJoinFields(const Header& h) {
  constexpr uint32_t kJoinFlags = kFlagJoinLeads | kFlagJoinRelease;
  if (static_cast<MsgType>(h.type) == MsgType::kJoin &&
      ((h.flags & ~kJoinFlags) != 0 || h.flags == kJoinFlags || h.nparams != 0 ||
       h.codec != 0 || h.reduce_op != 0 || h.dtype != static_cast<uint8_t>(DType::kInt32) ||
       h.count != 1 || h.total_count == 0)) {
    return InvalidArgument("a join carries int32[1] (its rank), one partition per server, "
                           "at most one of the leading-join and release flags, and nothing "
                           "else (flags " + Hex(h.flags) + ")");
  }
  if (static_cast<MsgType>(h.type) != MsgType::kJoin && (h.flags & kJoinFlags) != 0) {
    return InvalidArgument("the leading-join and release flags are only valid on a join "
                           "(type " + std::to_string(h.type) + ", flags " + Hex(h.flags) + ")");
  }
  return Status::Ok();
}

// DecodeHead for every message but the shared-memory ones, which it checks as their base.
// The checks run in this order; the first that fails is the error.
Status DecodeHeadAsSent(const void* data, size_t size, size_t payload_size, Head* head) {
  TFPS_RETURN_IF_ERROR(ReadHeadFrame(data, size, head));
  const Header& h = head->header;
  TFPS_RETURN_IF_ERROR(CheckPsApplyFields(h));
  TFPS_RETURN_IF_ERROR(CheckFlagsOfType(h, payload_size));
  TFPS_RETURN_IF_ERROR(CheckCollectiveFields(*head));
  TFPS_RETURN_IF_ERROR(CheckHierarchicalFields(h));
  TFPS_RETURN_IF_ERROR(CheckCodecFields(h));
  TFPS_RETURN_IF_ERROR(CheckJoinFields(h));
  if (CarriesTensor(static_cast<MsgType>(h.type))) return CheckTensorFields(*head, payload_size);
  return Status::Ok();
}

}  // namespace

Status CheckMessageSize(const Header& h, uint64_t max_bytes) {
  // A sparse message counts rows, and its payload (checked exactly by DecodeHead) is all
  // it stands for: the transport's own limit bounds it.
  if (!CarriesTensor(BaseType(static_cast<MsgType>(h.type))) || (h.flags & kFlagSparse) != 0) {
    return Status::Ok();
  }
  const DType dtype = static_cast<DType>(h.dtype);
  // count <= kMaxElements (2^40) and elements are <= 8 bytes: no overflow.
  const uint64_t bytes = h.count * DTypeSize(dtype);
  if (bytes > max_bytes) {
    return InvalidArgument(std::to_string(h.count) + " x " + DTypeName(dtype) + " = " +
                           std::to_string(bytes) + " bytes" +
                           ((h.flags & kFlagNoData) != 0 ? " (announced without data)" : "") +
                           " exceeds TFPS_MAX_MESSAGE_BYTES=" + std::to_string(max_bytes));
  }
  return Status::Ok();
}

bool IsBatchHead(const void* data, size_t size) {
  if (size < sizeof(Header)) return false;
  Header h;
  std::memcpy(&h, data, sizeof(Header));
  return h.type == static_cast<uint16_t>(MsgType::kBatch);
}

Head HeadAbout(const Header& about, MsgType type, int32_t sender) {
  Head head;
  head.header.type = static_cast<uint16_t>(type);
  head.header.key = about.key;
  head.header.partition = about.partition;
  head.header.num_partitions = about.num_partitions;
  head.header.step = about.step;
  head.header.sender = sender;
  return head;
}

Status CheckBatch(const Header& batch, size_t frames_after_head) {
  if (frames_after_head != 2 * batch.count) {
    return InvalidArgument("a batch of " + std::to_string(batch.count) + " messages needs " +
                           std::to_string(2 * batch.count) + " frames after its head, got " +
                           std::to_string(frames_after_head));
  }
  return Status::Ok();
}

double WallMicros() {
  using namespace std::chrono;
  return static_cast<double>(
      duration_cast<microseconds>(system_clock::now().time_since_epoch()).count());
}

uint64_t RowElements(const std::vector<int64_t>& dims) {
  uint64_t row = 1;
  for (size_t i = 1; i < dims.size(); ++i) row *= static_cast<uint64_t>(std::max<int64_t>(0, dims[i]));
  return row;
}

std::string DescribeTensor(DType dtype, const std::vector<int64_t>& dims) {
  std::string s = DTypeName(dtype);
  s += "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) s += ",";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

uint64_t KeyOfName(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV offset basis
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;  // FNV prime
  }
  return h;
}

}  // namespace tfps

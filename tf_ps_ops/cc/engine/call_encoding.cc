// A call's payloads that are not the tensor's bytes (loop.h): the rows of a sparse update
// (PS mode), cut by partition and answered row by row, and the partitions a GPU kernel
// encodes on the device (device_codec.h).
#include <algorithm>
#include <cstring>

#include "tf_ps_ops/cc/engine/loop.h"

namespace tfps {

// Checks a sparse request and finds each partition's rows. Only whole rows can be cut out
// of a partition, so a row must fit in one (TFPS_PARTITION_BYTES).
Status Engine::Loop::PrepareSparseOnLoop(Op& op) const {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const PushPullRequest& r = op.request;
  const size_t elem = DTypeSize(r.dtype);
  if (r.dims.empty()) return InvalidArgument("a sparse update needs a tensor of rank >= 1");
  const uint64_t row_bytes = op.row_elems * elem;
  if (op.row_elems > 1 && row_bytes > static_cast<uint64_t>(config_.partition_bytes)) {
    return InvalidArgument("rows of " + std::to_string(row_bytes) + " bytes do not fit in a "
                           "partition (TFPS_PARTITION_BYTES=" +
                           std::to_string(config_.partition_bytes) +
                           "): sparse updates need whole rows per partition");
  }
  const uint64_t num_rows = static_cast<uint64_t>(r.dims[0]);
  for (uint64_t i = 0; i < r.num_rows; ++i) {
    if (r.rows[i] < 0 || static_cast<uint64_t>(r.rows[i]) >= num_rows ||
        (i > 0 && r.rows[i] <= r.rows[i - 1])) {
      return InvalidArgument("sparse row ids must be increasing and within [0, " +
                             std::to_string(num_rows) + "); got " + std::to_string(r.rows[i]));
    }
  }
  op.row_begin.resize(op.parts.size() + 1);
  for (size_t i = 0; i < op.parts.size(); ++i) {
    const int64_t first = static_cast<int64_t>(op.parts[i].offset / op.row_elems);
    op.row_begin[i] = std::lower_bound(r.rows, r.rows + r.num_rows, first) - r.rows;
  }
  op.row_begin.back() = r.num_rows;
  return Status::Ok();
}

// [local row ids][rows]: the request's rows in this partition, copied (they are few).
zmq::message_t Engine::Loop::SparsePayload(const Op& op, uint32_t index) const {
  const PushPullRequest& r = op.request;
  const uint64_t begin = op.row_begin[index], n = op.row_begin[index + 1] - begin;
  const uint64_t row_bytes = op.row_elems * DTypeSize(r.dtype);
  const int64_t first = static_cast<int64_t>(op.parts[index].offset / op.row_elems);
  zmq::message_t payload(n * (sizeof(int64_t) + row_bytes));
  auto* ids = static_cast<int64_t*>(payload.data());
  for (uint64_t i = 0; i < n; ++i) ids[i] = r.rows[begin + i] - first;
  if (n > 0) {
    std::memcpy(ids + n, static_cast<const char*>(r.input) + begin * row_bytes, n * row_bytes);
  }
  return payload;
}

Status Engine::Loop::OnSparseReplyOnLoop(Op& op, const Header& h, const zmq::message_t& payload) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const Partition& p = op.parts[h.partition];
  if (h.type != static_cast<uint16_t>(MsgType::kPushPullReply) || (h.flags & kFlagSparse) == 0 ||
      h.dtype != static_cast<uint8_t>(op.request.dtype)) {
    return Internal("answered sparse partition " + std::to_string(h.partition) +
                    " with the wrong type");
  }
  const uint64_t rows_here = p.count / op.row_elems;
  const auto* local = static_cast<const int64_t*>(payload.data());
  std::vector<int64_t> ids(h.count);
  const int64_t first = static_cast<int64_t>(p.offset / op.row_elems);
  for (uint64_t i = 0; i < h.count; ++i) {
    if (local[i] < 0 || static_cast<uint64_t>(local[i]) >= rows_here) {
      return Internal("answered row " + std::to_string(local[i]) + " outside partition " +
                      std::to_string(h.partition));
    }
    ids[i] = local[i] + first;
  }
  if (op.request.on_rows && h.count > 0) op.request.on_rows(ids.data(), h.count, local + h.count);
  return Status::Ok();
}

Status Engine::Loop::EncodeOnDeviceOnLoop(Op& op) {
  TFPS_CHECK_ON_LOOP(loop_thread_);
  const PushPullRequest& r = op.request;
  if (op.codec.id == CodecId::kNone || !op.row_begin.empty()) {
    return Internal("'" + r.name + "' came to be encoded on the GPU but is not compressed");
  }
  uint64_t raw = 0, encoded = 0;
  for (const Partition& p : op.parts) {
    if (p.count > kMaxEncodedElements) {
      return InvalidArgument("compressing '" + r.name + "': a partition of " +
                             std::to_string(p.count) + " elements is more than a compressed "
                             "message may carry (" + std::to_string(kMaxEncodedElements) +
                             "); lower TFPS_PARTITION_BYTES");
    }
  }
  TFPS_RETURN_IF_ERROR(r.device_codec
                           ->EncodeParts(op.codec, codec_.FeedbackFor(r), op.key, op.step,
                                         op.parts, &op.device_encoded)
                           .WithPrefix("compressing '" + r.name + "' on the GPU: "));
  bool sizes_ok = op.device_encoded.size() == op.parts.size();
  for (size_t i = 0; sizes_ok && i < op.parts.size(); ++i) {
    const uint64_t n = op.parts[i].count;
    sizes_ok = op.device_encoded[i].size ==
               EncodedBytes(op.codec.id, n, SparseK(op.codec.ratio, n));
    raw += 4 * n;
    encoded += op.device_encoded[i].size;
  }
  if (!sizes_ok) {
    op.device_encoded.clear();
    return Internal("compressing '" + r.name + "' on the GPU gave parts of the wrong size");
  }
  codec_.Count(raw, encoded);
  return Status::Ok();
}

}  // namespace tfps

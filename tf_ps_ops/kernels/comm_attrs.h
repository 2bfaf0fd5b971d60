// The attrs of the communication kernels (PsPushPull, PsBroadcast, PsAllgather) and the
// checks of their inputs before the tensor moves, for their CPU and GPU kernels alike.
// Inline and free of Eigen: it costs the files that include it (they include op_kernel.h
// already) nothing to speak of.
#ifndef TFPS_KERNELS_COMM_ATTRS_H_
#define TFPS_KERNELS_COMM_ATTRS_H_

#include <optional>
#include <string>
#include <vector>

#include "tensorflow/core/framework/op_kernel.h"
#include "tf_ps_ops/kernels/tf_adapter.h"

namespace tfps {

// `tensor_name`, or the node's own name when it is empty.
inline absl::Status ReadTensorName(tensorflow::OpKernelConstruction* ctx, std::string* name) {
  absl::Status s = ctx->GetAttr("tensor_name", name);
  if (s.ok() && name->empty()) *name = ctx->def().name();
  return s;
}

inline Status ParseReduceOp(const std::string& name, ReduceOp* op) {
  for (uint8_t v = 0; v <= kMaxReduceOp; ++v) {
    if (name == ReduceOpName(static_cast<ReduceOp>(v))) {
      *op = static_cast<ReduceOp>(v);
      return Status::Ok();
    }
  }
  return InvalidArgument("unknown reduce_op '" + name + "'");
}

// PsPushPull's and PsBroadcast's attrs (each op has a subset).
struct CommAttrs {
  std::string tensor_name;
  int root_rank = -1;
  std::vector<int32_t> process_set;  // members; empty: every worker
  int priority = 0;
  ReduceOp reduce_op = ReduceOp::kSum;
  std::optional<CodecSpec> codec;  // none: the job default, resolved by the engine
  int error_feedback = -1;

  absl::Status Read(tensorflow::OpKernelConstruction* ctx) {
    absl::Status s = ReadTensorName(ctx, &tensor_name);
    if (s.ok() && ctx->HasAttr("root_rank")) s = ctx->GetAttr("root_rank", &root_rank);
    if (s.ok() && ctx->HasAttr("priority")) s = ctx->GetAttr("priority", &priority);
    if (s.ok() && ctx->HasAttr("process_set")) s = ctx->GetAttr("process_set", &process_set);
    if (s.ok() && ctx->HasAttr("reduce_op")) {
      std::string op;
      s = ctx->GetAttr("reduce_op", &op);
      if (s.ok()) s = ToTfStatus(ParseReduceOp(op, &reduce_op));
    }
    if (s.ok() && ctx->HasAttr("compression")) {
      std::string compression;
      s = ctx->GetAttr("compression", &compression);
      if (s.ok() && !compression.empty()) {
        CodecSpec spec;
        s = ToTfStatus(ParseCodec(compression, &spec));
        codec = spec;
      }
      if (s.ok()) s = ctx->GetAttr("error_feedback", &error_feedback);
    }
    return s;
  }

  // Before a call: the engine runs, and a broadcast's root is a rank.
  absl::Status Check(const std::string& op_type) const {
    absl::Status s = RequireInitialised(op_type + " of '" + tensor_name + "'");
    if (s.ok() && root_rank >= 0 && root_rank >= Engine::Get().size()) {
      s = absl::InvalidArgumentError("broadcast of '" + tensor_name + "': root_rank " +
                                     std::to_string(root_rank) + " is not below size " +
                                     std::to_string(Engine::Get().size()));
    }
    return s;
  }

  // The request for `input` into `output`, with these attrs.
  PushPullRequest Request(const tensorflow::Tensor& input, tensorflow::Tensor* output) const {
    PushPullRequest r = RequestFor(tensor_name, input, output);
    r.root_rank = root_rank;
    r.members = process_set;
    r.priority = priority;
    r.reduce_op = reduce_op;
    r.codec = codec;
    r.error_feedback = error_feedback;
    return r;
  }
};

// PsAllgather's input: at least one dimension (the one the workers' parts line up along).
inline absl::Status CheckGatherInput(const std::string& tensor_name,
                                     const tensorflow::Tensor& input) {
  if (input.dims() >= 1) return RequireInitialised("allgather of '" + tensor_name + "'");
  return absl::InvalidArgumentError("allgather of '" + tensor_name +
                                    "' needs a tensor of rank >= 1, got a scalar");
}

}  // namespace tfps

#endif  // TFPS_KERNELS_COMM_ATTRS_H_

// The graph rewrite as a Grappler optimizer, for v1 Sessions built by code we cannot patch:
//   config.graph_options.rewrite_options.custom_optimizers.add().name = "TfpsPsRewrite"
// swaps ResourceApplyXXX / ResourceSparseApplyXXX nodes for their PsApplyXXX twins (same
// inputs and attrs) and keys each by the node feeding its `var` input, exactly like
// tf_ps_ops.rewrite_graph_def (the table there is the same: tf_ps_ops/ps_mode.py SWAPS).
#include <map>
#include <string>

#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/grappler/grappler_item.h"
#include "tensorflow/core/grappler/optimizers/custom_graph_optimizer.h"
#include "tensorflow/core/grappler/optimizers/custom_graph_optimizer_registry.h"

namespace tfps {
namespace {

using tensorflow::GraphDef;
using tensorflow::grappler::Cluster;
using tensorflow::grappler::GrapplerItem;

const std::map<std::string, std::string>& Swaps() {
  static const auto* swaps = new std::map<std::string, std::string>{
      {"ResourceApplyGradientDescent", "PsApplyGradientDescent"},
      {"ResourceApplyMomentum", "PsApplyMomentum"},
      {"ResourceApplyKerasMomentum", "PsApplyKerasMomentum"},
      {"ResourceApplyAdam", "PsApplyAdam"},
      {"ResourceApplyAdamWithAmsgrad", "PsApplyAdamWithAmsgrad"},
      {"ResourceApplyAdagrad", "PsApplyAdagrad"},
      {"ResourceApplyAdagradV2", "PsApplyAdagradV2"},
      {"ResourceApplyRMSProp", "PsApplyRMSProp"},
      {"ResourceApplyCenteredRMSProp", "PsApplyCenteredRMSProp"},
      {"ResourceSparseApplyMomentum", "PsSparseApplyMomentum"},
      {"ResourceSparseApplyKerasMomentum", "PsSparseApplyKerasMomentum"},
      {"ResourceSparseApplyAdagrad", "PsSparseApplyAdagrad"},
      {"ResourceSparseApplyAdagradV2", "PsSparseApplyAdagradV2"},
      {"ResourceSparseApplyRMSProp", "PsSparseApplyRMSProp"},
      {"ResourceSparseApplyCenteredRMSProp", "PsSparseApplyCenteredRMSProp"},
  };
  return *swaps;
}

class PsRewriteOptimizer : public tensorflow::grappler::CustomGraphOptimizer {
 public:
  std::string name() const override { return "TfpsPsRewrite"; }
  bool UsesFunctionLibrary() const override { return false; }
  absl::Status Init(const tensorflow::RewriterConfig_CustomGraphOptimizer*) override {
    return absl::OkStatus();
  }

  absl::Status Optimize(Cluster*, const GrapplerItem& item, GraphDef* out) override {
    *out = item.graph;
    for (tensorflow::NodeDef& node : *out->mutable_node()) {
      auto it = Swaps().find(node.op());
      if (it == Swaps().end() || node.input_size() == 0) continue;
      std::string source = node.input(0);
      if (!source.empty() && source[0] == '^') source = source.substr(1);
      source = source.substr(0, source.find(':'));
      node.set_op(it->second);
      (*node.mutable_attr())["tensor_name"].set_s("ps:" + source);
    }
    return absl::OkStatus();
  }
};

REGISTER_GRAPH_OPTIMIZER_AS(PsRewriteOptimizer, "TfpsPsRewrite");

}  // namespace
}  // namespace tfps

// The graph rewrite as a Grappler optimizer, for v1 Sessions built by code we cannot patch:
//   config.graph_options.rewrite_options.custom_optimizers.add().name = "TfpsPsRewrite"
// swaps ResourceApplyXXX / ResourceSparseApplyXXX nodes for their PsApplyXXX twins (same
// inputs and attrs), in the graph and in its function library, and keys each by the node
// feeding its `var` input: the rule and the table (ps_op_table.cc) of
// tf_ps_ops.ps_mode.rewrite_graph_def, which reads that table through c_api.h.
#include <map>
#include <string>

#include "tensorflow/core/framework/function.pb.h"
#include "tensorflow/core/framework/graph.pb.h"
#include "tensorflow/core/grappler/grappler_item.h"
#include "tensorflow/core/grappler/optimizers/custom_graph_optimizer.h"
#include "tensorflow/core/grappler/optimizers/custom_graph_optimizer_registry.h"
#include "tf_ps_ops/kernels/ps_op_table.h"

namespace tfps {
namespace {

using tensorflow::GraphDef;
using tensorflow::grappler::Cluster;
using tensorflow::grappler::GrapplerItem;

template <typename Nodes>
void SwapNodes(const std::map<std::string, std::string>& swaps, Nodes* nodes) {
  for (tensorflow::NodeDef& node : *nodes) {
    auto it = swaps.find(node.op());
    if (it == swaps.end() || node.input_size() == 0) continue;
    node.set_op(it->second);
    (*node.mutable_attr())["tensor_name"].set_s(PsKeyOfInput(node.input(0)));
  }
}

class PsRewriteOptimizer : public tensorflow::grappler::CustomGraphOptimizer {
 public:
  std::string name() const override { return "TfpsPsRewrite"; }
  bool UsesFunctionLibrary() const override { return false; }
  absl::Status Init(const tensorflow::RewriterConfig_CustomGraphOptimizer*) override {
    return absl::OkStatus();
  }

  absl::Status Optimize(Cluster*, const GrapplerItem& item, GraphDef* out) override {
    static const auto* swaps = [] {
      auto* table = new std::map<std::string, std::string>;
      for (const auto& swap : PsSwaps()) table->insert(swap);
      return table;
    }();
    *out = item.graph;
    SwapNodes(*swaps, out->mutable_node());
    for (tensorflow::FunctionDef& function : *out->mutable_library()->mutable_function()) {
      SwapNodes(*swaps, function.mutable_node_def());
    }
    return absl::OkStatus();
  }
};

REGISTER_GRAPH_OPTIMIZER_AS(PsRewriteOptimizer, "TfpsPsRewrite");

}  // namespace
}  // namespace tfps

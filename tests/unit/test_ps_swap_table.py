"""PS mode's swap table (stock op -> PsApplyXXX op) lives once, in the op library
(kernels/ps_op_table.cc). Both rewriters use it: Python's (`enable_graph_rewrite`,
`rewrite_graph_def`) reads it through the library's C API, the Grappler optimizer
(TfpsPsRewrite) directly. These tests check what the rewrites do, in one process without
a cluster: the swapped ops can stand in for the stock ones, and the two rewriters swap the
same nodes, in the graph and in its function library, with the same keys.
"""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

tf = pytest.importorskip("tensorflow")

from cluster import require_build  # noqa: E402

# The stock update ops PS mode has always swapped: the table may grow, never lose one.
STOCK_OPS = {
    "ResourceApplyGradientDescent", "ResourceApplyMomentum", "ResourceApplyKerasMomentum",
    "ResourceApplyAdam", "ResourceApplyAdamWithAmsgrad", "ResourceApplyAdagrad",
    "ResourceApplyAdagradV2", "ResourceApplyRMSProp", "ResourceApplyCenteredRMSProp",
    "ResourceSparseApplyMomentum", "ResourceSparseApplyKerasMomentum",
    "ResourceSparseApplyAdagrad", "ResourceSparseApplyAdagradV2", "ResourceSparseApplyRMSProp",
    "ResourceSparseApplyCenteredRMSProp",
}


@pytest.fixture(scope="module")
def ps_mode():
    require_build()
    from tf_ps_ops.ps import ps_mode as module
    module._ops()  # registers our ops and the Grappler optimizer
    return module


def _op_def(name):
    from tensorflow.python.framework import op_def_registry
    op_def = op_def_registry.get(name)
    assert op_def is not None, f"{name} is not a registered op"
    return op_def


def test_the_table_covers_the_stock_ops(ps_mode):
    missing = STOCK_OPS - set(ps_mode.swaps())
    assert not missing, f"no longer swapped: {sorted(missing)}"


@pytest.mark.parametrize("stock", sorted(STOCK_OPS))
def test_each_swap_is_a_one_to_one_node_swap(ps_mode, stock):
    """Our op takes the stock op's inputs, in order, and its attrs (plus tensor_name), so
    a node keeps its inputs and attrs when its op changes."""
    ours, theirs = _op_def(ps_mode.swaps()[stock]), _op_def(stock)
    assert [a.name for a in ours.input_arg] == [a.name for a in theirs.input_arg]
    our_attrs = {a.name for a in ours.attr}
    missing = {a.name for a in theirs.attr if a.name not in our_attrs and not
               a.HasField("default_value")}
    assert not missing, f"{ours.name} lacks the attrs {sorted(missing)} of {stock}"
    assert "tensor_name" in our_attrs


def test_keys_use_the_library_prefix(ps_mode):
    assert ps_mode.ps_key("dense/kernel") == "ps:dense/kernel"


def _graph_with_updates_in_a_function():
    """A v1 Momentum update in the graph and a gradient-descent update inside a function
    of its library (as tf.function puts it)."""
    graph = tf.Graph()
    with graph.as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.ones([3, 2]), use_resource=True)
        train = tf.compat.v1.train.MomentumOptimizer(0.1, 0.9).minimize(tf.reduce_sum(w * w))

        @tf.function
        def step(v, g):
            tf.raw_ops.ResourceApplyGradientDescent(var=v, alpha=0.1, delta=g)
            return tf.constant(1)

        done = step(w.handle, tf.ones([3, 2]))
        tf.compat.v1.add_to_collection("train_op", tf.group(train, done))
    return graph


def _grappler_rewrite(graph):
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2
    from tensorflow.python.framework import meta_graph
    from tensorflow.python.grappler import tf_optimizer
    config = config_pb2.ConfigProto()
    rewrite = config.graph_options.rewrite_options
    rewrite.optimizers.append("TfpsPsRewrite")  # ours alone, once
    rewrite.custom_optimizers.add().name = "TfpsPsRewrite"
    rewrite.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    rewrite.min_graph_nodes = -1
    return tf_optimizer.OptimizeGraph(config, meta_graph.create_meta_graph_def(graph=graph))


def _updates(graph_def):
    """{(function or "", node name): (op, tensor_name)} of the update nodes."""
    def pick(where, nodes):
        return {(where, n.name): (n.op, n.attr["tensor_name"].s.decode())
                for n in nodes if n.op.startswith(("Ps", "ResourceApply", "ResourceSparse"))}
    found = pick("", graph_def.node)
    for function in graph_def.library.function:
        found.update(pick(function.signature.name, function.node_def))
    return found


def test_both_rewriters_swap_the_same_nodes_in_graph_and_functions(ps_mode):
    graph = _graph_with_updates_in_a_function()
    by_python = _updates(ps_mode.rewrite_graph_def(graph.as_graph_def()))
    by_grappler = _updates(_grappler_rewrite(graph))
    ops = sorted(op for op, _ in by_python.values())
    assert ops == ["PsApplyGradientDescent", "PsApplyMomentum"], by_python
    in_function = [v for (where, _), v in by_python.items() if where]
    assert in_function == [("PsApplyGradientDescent", "ps:v")], by_python
    assert by_grappler == by_python

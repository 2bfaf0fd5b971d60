"""sfb.Dense, sfb.convert and the SFB matmul's graph, in one process without a cluster
(before tf_ps_ops.init() the layer is keras.layers.Dense; tracing needs no peers)."""

import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

tf = pytest.importorskip("tensorflow")
import keras  # noqa: E402

import sfb  # noqa: E402
from cluster import require_build  # noqa: E402


def mlp():
    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(5, activation="relu"),
                             keras.layers.Dense(3, name="logits")])


def functional_with_nested():
    keras.utils.set_random_seed(2)
    inputs = keras.Input((4, 4, 2))
    h = keras.layers.Conv2D(3, 2, name="conv")(inputs)
    h = keras.layers.Flatten()(h)
    inner = keras.Sequential([keras.Input((27,)), keras.layers.Dense(8, name="inner_fc")],
                             name="inner")
    h = inner(h)
    outputs = keras.layers.Dense(2, kernel_regularizer="l2", name="head")(h)
    return keras.Model(inputs, outputs)


def _dense_types(model):
    return {layer.name: type(layer) for layer in sfb.policy.dense_layers(model)}


def test_convert_sequential_replaces_dense_and_keeps_weights():
    model = mlp()
    converted = sfb.convert(model, mode="sfb")
    assert set(_dense_types(converted).values()) == {sfb.Dense}
    for old, new in zip(model.get_weights(), converted.get_weights()):
        np.testing.assert_array_equal(old, new)
    x = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)
    np.testing.assert_array_equal(model(x), converted(x))  # not initialised: plain Dense


def test_convert_functional_with_nested_model():
    model = functional_with_nested()
    converted = sfb.convert(model, mode="sfb")
    assert _dense_types(converted) == {"inner_fc": sfb.Dense, "head": sfb.Dense}
    assert type(converted.get_layer("conv")) is keras.layers.Conv2D
    for old, new in zip(model.get_weights(), converted.get_weights()):
        np.testing.assert_array_equal(old, new)
    head = converted.get_layer("head")
    assert sfb.is_sfb_variable(head.kernel) and sfb.is_sfb_variable(head.kernel._value)
    assert not sfb.is_sfb_variable(head.bias)
    assert not sfb.is_sfb_variable(model.get_layer("head").kernel)


def test_config_round_trip():
    layer = sfb.Dense(7, activation="tanh", use_bias=False, kernel_initializer="ones",
                      kernel_regularizer=keras.regularizers.L2(0.1),
                      kernel_constraint=keras.constraints.MaxNorm(2.0), name="fc")
    clone = sfb.Dense.from_config(layer.get_config())
    assert type(clone) is sfb.Dense
    assert clone.get_config() == layer.get_config()
    model = sfb.convert(mlp(), mode="sfb")
    restored = keras.models.model_from_json(model.to_json())
    assert set(_dense_types(restored).values()) == {sfb.Dense}


def test_modes_overrides_and_environment(monkeypatch):
    model = mlp()
    names = [layer.name for layer in model.layers]
    hybrid = sfb.convert(model, mode="hybrid", batch_size=1, num_workers=2, num_servers=1)
    # 6×5 at K=1: SFB 2·1·1·11 = 22 < PS 2·30·1/1 = 60; 5×3: 16 < 30.
    assert set(_dense_types(hybrid).values()) == {sfb.Dense}
    hybrid = sfb.convert(model, mode="hybrid", batch_size=1, num_workers=2, num_servers=1,
                         overrides={names[0]: "ps"})
    assert _dense_types(hybrid) == {names[0]: keras.layers.Dense, "logits": sfb.Dense}
    assert set(_dense_types(sfb.convert(model, mode="ps")).values()) == {keras.layers.Dense}
    monkeypatch.setenv("TFPS_MODE", "sum")
    assert set(_dense_types(sfb.convert(model)).values()) == {keras.layers.Dense}
    monkeypatch.setenv("TFPS_MODE", "hybrid")
    with pytest.raises(ValueError, match="batch_size"):
        sfb.convert(model)
    monkeypatch.setenv("TFPS_MODE", "bogus")
    with pytest.raises(ValueError, match="TFPS_MODE"):
        sfb.convert(model)
    with pytest.raises(ValueError, match="not Dense layers"):
        sfb.convert(model, mode="sfb", overrides={"conv": "ps"})


def test_hybrid_counts_positions_of_rank_3_inputs():
    inputs = keras.Input((50, 64))  # 50 tokens per example: K = 50 · batch
    model = keras.Model(inputs, keras.layers.Dense(64, name="proj")(inputs))
    (decision,) = sfb.policy.plan(model, batch_size=4, workers=4, servers=4)
    assert decision.k == 200 and decision.choice == "ps"


def test_subclassed_model_is_refused():
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.fc = keras.layers.Dense(2)

        def call(self, x):
            return self.fc(x)

    with pytest.raises(TypeError, match="sfb.Dense"):
        sfb.convert(Net())


def _depends_on(op, other):
    seen, stack = set(), [op]
    while stack:
        current = stack.pop()
        if current is other:
            return True
        if current.name in seen:
            continue
        seen.add(current.name)
        stack += [t.op for t in current.inputs] + list(current.control_inputs)
    return False


def test_factor_exchanges_are_not_chained_in_a_tf_function():
    """Wait-free backprop: each exchange is ordered only against its own variable, so
    neither waits for the other (nor for the lower layer's backward)."""
    require_build()
    from sfb.ops import sfb_matmul

    w1, w2 = tf.Variable(tf.ones([6, 5])), tf.Variable(tf.ones([5, 3]))

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(sfb_matmul(x, w1, w1.handle, "w1"))
            y = sfb_matmul(tf.reshape(h, [2, 2, 5]), w2, w2.handle, "w2")  # rank 3
            loss = tf.reduce_sum(y ** 2)
        grads = tape.gradient(loss, [w1, w2])
        w1.assign_sub(grads[0])
        w2.assign_sub(grads[1])
        return y

    graph = step.get_concrete_function(tf.TensorSpec([4, 6])).graph
    assert graph.outputs[0].shape == [2, 2, 3]
    exchanges = [op for op in graph.get_operations() if op.type == "SfbFactorGradient"]
    assert len(exchanges) == 2
    first, second = exchanges
    assert not _depends_on(first, second) and not _depends_on(second, first)
    assert {op.get_attr("tensor_name") for op in exchanges} == {b"w1", b"w2"}


def test_reduce_gradients_passes_sfb_kernels_through():
    from tf_ps_ops.compression import Compression
    from tf_ps_ops.collectives.ops import Average
    from tf_ps_ops.training.tape import reduce_gradients

    layer = sfb.Dense(2)
    layer.build((None, 3))
    grad = tf.ones([3, 2])
    # Not initialised: a push_pull would fail, so the kernel's gradient must not reach one.
    (out,) = reduce_gradients([grad], ["k"], Compression.none, Average,
                              variables=[layer.kernel])
    assert out is grad


def test_kernels_of_the_same_path_get_distinct_keys():
    first, second = sfb.Dense(2, name="twin"), sfb.Dense(2, name="twin")
    first.build((None, 3))
    second.build((None, 3))
    keys = {first._sfb_key, second._sfb_key}
    assert len(keys) == 2 and all(key.startswith("sfb.twin/kernel") for key in keys), keys

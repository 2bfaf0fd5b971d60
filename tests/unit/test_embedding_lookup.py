"""tf_ps_ops.keras.Embedding against keras.layers.Embedding (the oracle): the same output,
mask, gradient and saved form, with the rows read through the variable (ResourceGather)
instead of a dense read of the whole table."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_ps_ops.training.embedding import Embedding

IDS = np.array([[3, 0, 7], [7, 7, 1]], np.int32)


def _pair(**kwargs):
    keras.utils.set_random_seed(0)
    ours, theirs = Embedding(10, 4, **kwargs), keras.layers.Embedding(10, 4, **kwargs)
    ours.build((None, 3))
    theirs.build((None, 3))
    theirs.set_weights(ours.get_weights())
    return ours, theirs


@pytest.mark.parametrize("ids", [IDS, IDS.astype(np.int64), IDS.astype(np.float32)])
def test_the_output_and_mask_are_keras_own(ids):
    ours, theirs = _pair(mask_zero=True)
    np.testing.assert_array_equal(ours(ids).numpy(), theirs(ids).numpy())
    np.testing.assert_array_equal(ours.compute_mask(ids).numpy(),
                                  theirs.compute_mask(ids).numpy())


def test_the_gradient_is_the_same_indexed_slices():
    ours, theirs = _pair()
    weights = tf.constant(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    grads = []
    for layer in (ours, theirs):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(IDS) * weights)
        grads.append(tape.gradient(loss, layer.trainable_variables)[0])
    assert isinstance(grads[0], tf.IndexedSlices)
    dense = [tf.convert_to_tensor(g).numpy() for g in grads]
    np.testing.assert_allclose(dense[0], dense[1])


def _op_types(layer):
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(layer.trainable_variables)

    @tf.function
    def step(ids):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(ids))
        optimizer.apply(tape.gradient(loss, layer.trainable_variables),
                        layer.trainable_variables)
        return loss

    graph = step.get_concrete_function(tf.TensorSpec((None, 3), tf.int32)).graph
    return [op.type for op in graph.get_operations()]


def test_a_training_step_reads_rows_not_the_table():
    """The step that copies a sparsely updated table in Keras's layer (a dense read, then
    a row update) reads only the looked-up rows in ours."""
    ours, theirs = _pair()
    assert "ResourceGather" in _op_types(ours)
    assert "GatherV2" not in _op_types(ours)
    assert "ResourceGather" not in _op_types(theirs)  # the oracle does read the table
    ours_trained, theirs_trained = _pair()
    for layer in (ours_trained, theirs_trained):
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(layer.trainable_variables)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(IDS) ** 2)
        optimizer.apply(tape.gradient(loss, layer.trainable_variables),
                        layer.trainable_variables)
    np.testing.assert_allclose(ours_trained.get_weights()[0], theirs_trained.get_weights()[0],
                               rtol=1e-6)


def test_mixed_precision_returns_the_compute_dtype():
    ours, theirs = _pair(dtype="mixed_float16")
    out = ours(IDS)
    assert out.dtype == theirs(IDS).dtype == tf.float16
    np.testing.assert_array_equal(out.numpy(), theirs(IDS).numpy())


def test_a_saved_model_loads_with_our_layer(tmp_path):
    ids = keras.Input((3,), dtype="int32")
    model = keras.Model(ids, Embedding(10, 4, name="table")(ids))
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded.get_layer("table")) is Embedding
    np.testing.assert_array_equal(loaded(IDS).numpy(), model(IDS).numpy())

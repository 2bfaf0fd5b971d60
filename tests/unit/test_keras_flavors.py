"""tf_keras (Keras 2) next to Keras 3 in one process, without a cluster: which Keras an
object belongs to, the optimizer wrapper's class, callbacks that follow the model's Keras,
load_model's choice of loader, the PS-mode optimizers' refusals and sfb.convert. The
training itself, against single-process oracles, is tests/multiprocess/test_tf_keras.py."""

import os
import warnings

import numpy as np
import pytest

tf_keras = pytest.importorskip("tf_keras")
import keras  # noqa: E402

import tf_ps_ops.keras as hvd  # noqa: E402
from tf_ps_ops.training.keras_flavor import (is_tf_keras,  # noqa: E402
                                             optimizer_built, optimizer_variables,
                                             tf_dot_keras_is_tf_keras)
from tf_ps_ops.training.keras_optimizer import TfKerasMixin  # noqa: E402


def _tf_keras_model(optimizer=None):
    model = tf_keras.Sequential([tf_keras.layers.Dense(2, input_shape=(3,))])
    if optimizer is not None:
        model.compile(optimizer=optimizer, loss="mse")
    return model


def test_objects_say_which_keras_they_belong_to():
    class Mine(tf_keras.optimizers.SGD):
        pass

    assert is_tf_keras(tf_keras.optimizers.SGD()) and is_tf_keras(Mine)
    assert is_tf_keras(tf_keras.optimizers.legacy.Adam()) and is_tf_keras(_tf_keras_model())
    assert not is_tf_keras(keras.optimizers.SGD()) and not is_tf_keras(keras.Sequential())
    legacy = tf_keras.optimizers.legacy.SGD(0.1, momentum=0.9)
    model = _tf_keras_model()
    assert not optimizer_built(legacy) and not optimizer_built(tf_keras.optimizers.SGD())
    legacy._create_all_weights(model.trainable_variables)
    assert optimizer_built(legacy)
    assert len(optimizer_variables(legacy)) == 1 + 2  # iterations and two momentum slots


def test_which_keras_tf_keras_is():
    import subprocess
    import sys

    assert not tf_dot_keras_is_tf_keras()  # tf_keras is imported, tf.keras is Keras 3
    code = ("import tensorflow as tf, tf_keras\n"
            "from tf_ps_ops.training.keras_flavor import tf_dot_keras_is_tf_keras\n"
            "assert tf_dot_keras_is_tf_keras(), tf.keras.__name__\n")
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.parametrize("make", [lambda: tf_keras.optimizers.Adam(0.01, beta_1=0.8),
                                  lambda: tf_keras.optimizers.legacy.SGD(0.1, momentum=0.5)])
def test_distributed_optimizer_is_the_users_class_with_its_config(make):
    optimizer = make()
    distributed = hvd.DistributedOptimizer(optimizer, backward_passes_per_step=2,
                                           compression=hvd.Compression.fp16)
    assert isinstance(distributed, type(optimizer)) and isinstance(distributed, TfKerasMixin)
    assert type(distributed).__name__ == type(optimizer).__name__
    assert type(distributed).__module__ == type(optimizer).__module__
    assert distributed.get_config() == optimizer.get_config()
    assert distributed._tfps_aggregation.passes == 2
    assert distributed._tfps_compression is hvd.Compression.fp16


def test_distributed_optimizer_refusals_name_the_cause():
    with pytest.raises(ValueError, match="algorithms need a Keras 3 optimizer; SGD is a "
                                         "tf_keras one"):
        from tf_ps_ops.algorithms import Decentralized
        hvd.DistributedOptimizer(tf_keras.optimizers.SGD(), algorithm=Decentralized())
    with pytest.raises(TypeError, match="wraps Keras 3 and tf_keras optimizers.*got str"):
        hvd.DistributedOptimizer("sgd")


def _fit(model, epochs, callbacks):
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)
    return model.fit(x, x[:, :2] * 2, batch_size=2, epochs=epochs, shuffle=False, verbose=0,
                     callbacks=callbacks)


def test_a_callback_follows_the_keras_of_the_model_it_is_given():
    schedule = hvd.callbacks.LearningRateScheduleCallback(0.1, lambda epoch: 0.5 ** epoch)
    assert isinstance(schedule, keras.callbacks.Callback)
    history = _fit(_tf_keras_model(tf_keras.optimizers.legacy.SGD(0.1, momentum=0.9)), 3,
                   [schedule])
    assert isinstance(schedule, tf_keras.callbacks.Callback)
    assert not isinstance(schedule, keras.callbacks.Callback)
    np.testing.assert_allclose(history.history["lr"], [0.1, 0.05, 0.025], rtol=1e-6)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    history = _fit(model, 2, [schedule])  # and back, for a Keras 3 model
    assert isinstance(schedule, keras.callbacks.Callback)
    np.testing.assert_allclose(history.history["lr"], [0.1, 0.05], rtol=1e-6)


def test_momentum_correction_where_momentum_is_a_variable():
    # tf_keras legacy: momentum is a variable the traced step reads, so Horovod's
    # correction applies (scaled for one batch after each change, then restored).
    seen = []

    class Momentum(tf_keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append(float(self.model.optimizer.momentum))

    model = _tf_keras_model(tf_keras.optimizers.legacy.SGD(0.1, momentum=0.9))
    schedule = hvd.callbacks.LearningRateScheduleCallback(0.1, lambda epoch: 0.5 ** epoch)
    _fit(model, 2, [schedule, Momentum()])
    assert seen[0] == pytest.approx(0.9) and seen[4] == pytest.approx(0.45)  # epoch 1's first
    assert seen[1:4] == pytest.approx([0.9] * 3) and seen[5:] == pytest.approx([0.9] * 3)
    assert float(model.optimizer.momentum) == pytest.approx(0.9)
    # tf_keras' new optimizers fix momentum when the step is traced: a warning says so.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _fit(_tf_keras_model(tf_keras.optimizers.SGD(0.1, momentum=0.9)), 1,
             [hvd.callbacks.LearningRateScheduleCallback(0.1, 1.0)])
    assert any("momentum_correction is not applied" in str(w.message) for w in caught)


@pytest.mark.parametrize("path", ["model.keras", "model.h5", "saved_model"])
def test_load_model_of_a_tf_keras_file(tmp_path, path):
    model = _tf_keras_model(hvd.DistributedOptimizer(tf_keras.optimizers.legacy.SGD(0.1, 0.9)))
    model.optimizer._create_all_weights(model.trainable_variables)
    model.optimizer.iterations.assign(7)
    path = os.path.join(tmp_path, path)
    model.save(path)
    loaded = hvd.load_model(path, compression=hvd.Compression.fp16)
    assert is_tf_keras(loaded) and isinstance(loaded.optimizer, TfKerasMixin)
    assert isinstance(loaded.optimizer, tf_keras.optimizers.legacy.SGD)
    assert loaded.optimizer._tfps_compression is hvd.Compression.fp16
    if path.endswith(".h5"):  # the other formats restore optimizer slots lazily
        assert int(loaded.optimizer.iterations) == 7
    for got, want in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, want)


def test_load_model_of_a_keras_3_file_is_unchanged(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    loaded = hvd.load_model(path)
    assert not is_tf_keras(loaded)
    assert isinstance(loaded.optimizer, hvd._DistributedOptimizerMixin)


def test_ps_mode_optimizers_for_tf_keras_refuse_local_only_features():
    from tf_ps_ops import optimizers

    assert issubclass(optimizers.tf_keras.Adam, tf_keras.optimizers.Adam)
    with pytest.raises(ValueError, match="weight_decay"):
        optimizers.tf_keras.SGD(0.1, weight_decay=0.01)
    with pytest.raises(ValueError, match="adaptive_epsilon"):
        optimizers.tf_keras.Adam(0.1, adaptive_epsilon=True)
    assert optimizers.tf_keras.SGD(0.1).jit_compile is False  # the PS ops have no XLA kernel
    with pytest.raises(TypeError, match="tf_ps_ops.optimizers.tf_keras.Adam"):
        optimizers.Adam(0.1).build(_tf_keras_model().trainable_variables)


def test_sfb_convert_of_a_tf_keras_model():
    import sfb
    from sfb.layers import tf_keras_dense

    inputs = tf_keras.Input((3,))
    hidden = tf_keras.layers.Dense(4, activation="tanh", name="hidden")(inputs)
    model = tf_keras.Model(inputs, tf_keras.layers.Dense(2, name="out")(hidden))
    converted = sfb.convert(model, mode="sfb", overrides={"out": "ps"})
    kinds = {layer.name: type(layer) for layer in converted.layers[1:]}
    assert kinds == {"hidden": tf_keras_dense(), "out": tf_keras.layers.Dense}, kinds
    assert sfb.is_sfb_variable(converted.get_layer("hidden").kernel)
    assert not sfb.is_sfb_variable(converted.get_layer("out").kernel)
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(converted(x).numpy(), model(x).numpy())  # no cluster: Dense
    with pytest.raises(TypeError, match="Sequential or functional"):
        sfb.convert(tf_keras.layers.Dense(2))

"""Worker for test_training.py, which also imports it to train the single-process oracle.

Data split: global batch k (NUM_WORKERS * BATCH rows) is the k-th BATCH rows of every
worker's shard, rank r taking its r-th slice. With equal shards, the average over
workers of each worker's mean-loss gradient is the mean-loss gradient of the global
batch, so distributed training must reproduce single-process training on it.
Every worker writes what it trained to $TFPS_TEST_OUT/rank<r>.npz.
"""

import os

import keras
import numpy as np
import tensorflow as tf

from harness import run_checks

NUM_WORKERS = 3
BATCH = 4  # rows per worker per step
TAPE_STEPS = 20  # the first half eagerly, the second half in a tf.function
FIT_STEPS, FIT_EPOCHS = 10, 2
LEARNING_RATE = 0.05


def dataset():
    """The global data set: (x, ids, y) with TAPE_STEPS global batches."""
    rng = np.random.default_rng(1234)
    rows = TAPE_STEPS * NUM_WORKERS * BATCH
    x = rng.normal(size=(rows, 4)).astype(np.float32)
    ids = rng.integers(0, 10, rows).astype(np.int32)
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.1 * np.sin(ids)[:, None]
    return x, ids, y.astype(np.float32)


def shard(array, rank, steps):
    """Worker `rank`'s rows of the first `steps` global batches, in step order."""
    batches = array[:steps * NUM_WORKERS * BATCH].reshape(steps, NUM_WORKERS, BATCH,
                                                          *array.shape[1:])
    return batches[:, rank].reshape(steps * BATCH, *array.shape[1:])


def tape_variables(seed):
    rng = np.random.default_rng(seed)
    shapes = {"table": (10, 3), "kernel": (7, 1), "bias": (1,), "unused": (2,)}
    return {name: tf.Variable(rng.normal(size=shape).astype(np.float32), name=name)
            for name, shape in shapes.items()}


def train_with_tape(variables, x, ids, y, batch, wrap_tape=lambda tape: tape):
    """Plain SGD on MSE; the table's gradient is a tf.IndexedSlices (a gather)."""

    def step(xb, idsb, yb):
        with tf.GradientTape() as tape:
            features = tf.concat([xb, tf.gather(variables["table"], idsb)], axis=1)
            prediction = features @ variables["kernel"] + variables["bias"]
            loss = tf.reduce_mean((prediction - yb) ** 2)
        grads = wrap_tape(tape).gradient(loss, variables)  # a dict, like the sources
        if grads["unused"] is not None:
            raise AssertionError("the unused variable got a gradient")
        for name, grad in grads.items():
            if grad is not None:
                variables[name].assign_sub(LEARNING_RATE * tf.convert_to_tensor(grad))

    graph_step = tf.function(step)
    for k in range(TAPE_STEPS):
        rows = slice(k * batch, (k + 1) * batch)
        (step if k < TAPE_STEPS // 2 else graph_step)(x[rows], ids[rows], y[rows])
    return {name: var.numpy() for name, var in variables.items()}


def keras_model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"),
                             keras.layers.Dense(1)])


def sgd_momentum():
    return keras.optimizers.SGD(LEARNING_RATE, momentum=0.9)


def save(**arrays):
    path = os.path.join(os.environ["TFPS_TEST_OUT"], f"rank{os.environ['TFPS_RANK']}.npz")
    previous = dict(np.load(path)) if os.path.exists(path) else {}
    np.savez(path, **previous, **arrays)


def check_tape_training(hvd):
    x, ids, y = dataset()
    me = hvd.rank()
    variables = tape_variables(seed=me)  # different on every worker until the broadcast
    hvd.broadcast_variables(list(variables.values()), root_rank=0)
    trained = train_with_tape(variables, shard(x, me, TAPE_STEPS), shard(ids, me, TAPE_STEPS),
                              shard(y, me, TAPE_STEPS), BATCH, hvd.DistributedGradientTape)
    save(**{f"tape.{name}": value for name, value in trained.items()})


def check_keras_fit(hvd):
    x, _, y = dataset()
    me = hvd.rank()
    model = keras_model(seed=100 + me)
    initial = [w.numpy() for w in model.weights]
    model.compile(optimizer=hvd.DistributedOptimizer(sgd_momentum()), loss="mse")
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback()]
    history = model.fit(shard(x, me, FIT_STEPS), shard(y, me, FIT_STEPS), batch_size=BATCH,
                        epochs=FIT_EPOCHS, shuffle=False, verbose=0, callbacks=callbacks)
    assert int(model.optimizer.iterations) == FIT_STEPS * FIT_EPOCHS
    save(**{f"fit.initial.{i}": w for i, w in enumerate(initial)},
         **{f"fit.final.{i}": w.numpy() for i, w in enumerate(model.weights)},
         **{"fit.loss": np.array(history.history["loss"])})


def check_apply_gradients_eager(hvd):
    """A custom loop calling apply_gradients eagerly also averages."""
    me, size = hvd.rank(), hvd.size()
    var = keras.Variable(np.ones(3, np.float32), name="custom_loop_var")
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.5))
    optimizer.apply_gradients([(tf.fill([3], float(me)), var)])
    np.testing.assert_allclose(var.numpy(), 1 - 0.5 * (size - 1) / 2, rtol=1e-6)


def check_learning_rate_warmup(hvd):
    """Horovod's warmup: initial_lr / size up to initial_lr, per batch, then constant."""
    size, steps, warmup_epochs, initial_lr = hvd.size(), 3, 2, 0.3
    model = keras_model(seed=8)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(1.0)), loss="mse")
    seen = []
    record = keras.callbacks.LambdaCallback(on_train_batch_begin=lambda batch, logs: seen.append(
        float(model.optimizer.learning_rate)))
    warmup = hvd.callbacks.LearningRateWarmupCallback(initial_lr, warmup_epochs,
                                                      momentum_correction=False)
    history = model.fit(np.zeros((steps * BATCH, 4)), np.zeros((steps * BATCH, 1)),
                        batch_size=BATCH, epochs=3, verbose=0, callbacks=[warmup, record])
    expected = [initial_lr / size * ((epoch + (batch + 1) / steps) * (size - 1) / warmup_epochs
                                     + 1) if epoch < warmup_epochs else initial_lr
                for epoch in range(3) for batch in range(steps)]
    np.testing.assert_allclose(seen, expected, rtol=1e-6)
    np.testing.assert_allclose(history.history["lr"], expected[steps - 1::steps], rtol=1e-6)


def check_jit_compile_refused(hvd):
    model = keras_model(seed=7)
    model.compile(optimizer=hvd.DistributedOptimizer(sgd_momentum()), loss="mse",
                  jit_compile=True)
    try:
        model.fit(np.zeros((4, 4)), np.zeros((4, 1)), batch_size=4, verbose=0)
    except RuntimeError as error:
        assert "jit_compile=False" in str(error), error
        return
    raise AssertionError("fit with jit_compile=True did not fail")


CHECKS = [check_tape_training, check_keras_fit, check_apply_gradients_eager,
          check_learning_rate_warmup, check_jit_compile_refused]

if __name__ == "__main__":
    run_checks(CHECKS)

"""Worker for test_sparse_gradients.py, which also imports it to train the single-process
oracle: an embedding table's gradient (a tf.IndexedSlices) with sparse_as_dense False
(Horovod's default: values and indices allgathered, only the touched rows travel) and
True (reduced dense through the servers), through DistributedGradientTape, a Keras 3
DistributedOptimizer under `fit`, and a tf_keras one.

Data split as in train_worker.py: global batch k is the k-th BATCH rows of every worker's
shard. Every worker writes what it trained, and the bytes it sent to the servers, to
$TFPS_TEST_OUT/rank<r>.npz.
"""

import os

import keras
import numpy as np
import tensorflow as tf

from harness import run_checks

NUM_WORKERS = 2
BATCH = 4  # rows per worker per step
STEPS = 6  # the first half eagerly (tape), the second half in a tf.function
ROWS, WIDTH = 2000, 8  # the table: 64 000 bytes of float32, a few rows touched per step
LEARNING_RATE = 0.5


def dataset():
    """(ids, y): STEPS global batches, two ids per example."""
    rng = np.random.default_rng(77)
    count = STEPS * NUM_WORKERS * BATCH
    ids = rng.integers(0, ROWS, (count, 2)).astype(np.int32)
    ids[::3, 0] = 5  # one row that both workers touch in most steps: duplicate indices
    y = (np.sin(ids[:, :1]) + 0.1 * ids[:, 1:] / ROWS).astype(np.float32)
    return ids, y


def shard(array, rank):
    batches = array.reshape(STEPS, NUM_WORKERS, BATCH, *array.shape[1:])
    return batches[:, rank].reshape(STEPS * BATCH, *array.shape[1:])


def tape_variables():
    rng = np.random.default_rng(3)
    return {"table": tf.Variable(rng.normal(size=(ROWS, WIDTH)).astype(np.float32)),
            "kernel": tf.Variable(rng.normal(size=(2 * WIDTH, 1)).astype(np.float32))}


def train_with_tape(variables, ids, y, batch, wrap_tape=lambda tape: tape, seen=None):
    """SGD on MSE; the table's gradient is a tf.IndexedSlices. `seen` collects the type of
    the table's gradient and its number of rows (in the eager steps)."""

    def step(idsb, yb):
        with tf.GradientTape() as tape:
            features = tf.reshape(tf.gather(variables["table"], idsb), (-1, 2 * WIDTH))
            loss = tf.reduce_mean((features @ variables["kernel"] - yb) ** 2)
        grads = wrap_tape(tape).gradient(loss, variables)
        table = grads["table"]
        if seen is not None and tf.executing_eagerly():
            seen.append((type(table).__name__, int(tf.shape(
                table.values if isinstance(table, tf.IndexedSlices) else table)[0])))
        if isinstance(table, tf.IndexedSlices):  # scatter-subtract: duplicates add up
            variables["table"].scatter_sub(tf.IndexedSlices(
                LEARNING_RATE * table.values, table.indices, table.dense_shape))
        else:
            variables["table"].assign_sub(LEARNING_RATE * table)
        variables["kernel"].assign_sub(LEARNING_RATE * grads["kernel"])

    graph_step = tf.function(step)
    for k in range(STEPS):
        rows = slice(k * batch, (k + 1) * batch)
        (step if k < STEPS // 2 else graph_step)(ids[rows], y[rows])
    return {name: var.numpy() for name, var in variables.items()}


def keras_model(K=keras):
    K.utils.set_random_seed(11)
    return K.Sequential([K.Input((2,), dtype="int32"),
                         K.layers.Embedding(ROWS, WIDTH),
                         K.layers.Flatten(), K.layers.Dense(1)])


def fit(model, optimizer, ids, y, batch):
    model.compile(optimizer=optimizer, loss="mse")
    history = model.fit(ids, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
    return [w for w in model.get_weights()], np.array(history.history["loss"])


def _tf_keras():
    import tf_keras
    return tf_keras


def save(**arrays):
    path = os.path.join(os.environ["TFPS_TEST_OUT"], f"rank{os.environ['TFPS_RANK']}.npz")
    previous = dict(np.load(path)) if os.path.exists(path) else {}
    np.savez(path, **previous, **arrays)


def _server_bytes(hvd):
    return hvd.metrics().get('tfps_worker_sent_bytes_total{peer="server"}', 0.0)


def _measured(hvd, name, run):
    """Runs `run`, saving the bytes this worker sent to the servers meanwhile."""
    before = _server_bytes(hvd)
    result = run()
    save(**{f"{name}.server_bytes": np.array(_server_bytes(hvd) - before)})
    return result


def check_tape(hvd):
    ids, y = dataset()
    me = hvd.rank()
    for dense in (False, True):
        seen = []
        wrap = lambda tape, dense=dense: hvd.DistributedGradientTape(  # noqa: E731
            tape, sparse_as_dense=dense)
        trained = _measured(hvd, f"tape.{dense}", lambda: train_with_tape(
            tape_variables(), shard(ids, me), shard(y, me), BATCH, wrap, seen))
        # Sparse: every worker's 2 * BATCH looked-up rows, gathered; dense: the table.
        expected = ("Tensor" if dense else "IndexedSlices",
                    ROWS if dense else NUM_WORKERS * 2 * BATCH)
        assert all((kind.endswith(expected[0]), rows) == (True, expected[1])
                   for kind, rows in seen), (dense, seen)
        save(**{f"tape.{dense}.{name}": value for name, value in trained.items()})


def _check_fit(hvd, K, tag):
    """Model.fit with DistributedOptimizer, sparse then dense: weights (and loss) saved."""
    ids, y = dataset()
    me = hvd.rank()
    for dense in (False, True):
        optimizer = hvd.DistributedOptimizer(K.optimizers.SGD(LEARNING_RATE),
                                             sparse_as_dense=dense)
        weights, loss = _measured(hvd, f"{tag}.{dense}", lambda: fit(
            keras_model(K), optimizer, shard(ids, me), shard(y, me), BATCH))
        save(**{f"{tag}.{dense}.{i}": w for i, w in enumerate(weights)},
             **{f"{tag}.{dense}.loss": loss})


def check_keras_fit(hvd):
    _check_fit(hvd, keras, "fit")


def check_tf_keras_fit(hvd):
    _check_fit(hvd, _tf_keras(), "tf_keras")


CHECKS = [check_tape, check_keras_fit, check_tf_keras_fit]

if __name__ == "__main__":
    run_checks(CHECKS)

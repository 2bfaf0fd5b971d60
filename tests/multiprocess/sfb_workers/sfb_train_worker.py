"""Worker for test_sfb.py (3 workers), which also imports it to train the single-process
oracles with the same code.

Data split as in workers/train_worker.py: global batch k is the k-th BATCH rows of every
worker's shard, rank r taking its r-th slice, so the average over workers of each worker's
mean-loss gradient is the mean-loss gradient of the global batch.
Every worker writes its results to $TFPS_TEST_OUT/rank<r>.npz.
"""

import ctypes
import os
import sys

import keras
import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workers"))
from harness import run_checks  # noqa: E402

import sfb  # noqa: E402

NUM_WORKERS = 3
BATCH = 8           # rows per worker per step
FIT_STEPS = 30
UNEQUAL_K = (32, 32, 7)
TAPE_STEPS = 4
HYBRID_STEPS = 10
LEARNING_RATE = 0.05


def dataset(rows, features, seed=1234):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, features)).astype(np.float32)
    w = rng.normal(size=(features, 1)).astype(np.float32)
    y = np.tanh(x @ w) + 0.1 * np.sin(x[:, :1])
    return x, y.astype(np.float32)


def shard(array, rank, steps):
    """Worker `rank`'s rows of the first `steps` global batches, in step order."""
    batches = array[:steps * NUM_WORKERS * BATCH].reshape(steps, NUM_WORKERS, BATCH,
                                                          *array.shape[1:])
    return batches[:, rank].reshape(steps * BATCH, *array.shape[1:])


def mlp(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((12,)),
                             keras.layers.Dense(16, activation="tanh", name="fc1"),
                             keras.layers.Dense(8, activation="relu", name="fc2"),
                             keras.layers.Dense(1, name="out")])


def conv_model(seed):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((8, 8, 1))
    h = keras.layers.Conv2D(4, 3, activation="relu", name="conv")(inputs)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(64, activation="relu", name="fc_big")(h)
    return keras.Model(inputs, keras.layers.Dense(1, name="out")(h))


def images(rows, seed=99):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 8, 8, 1)).astype(np.float32)
    y = np.tanh(x.mean(axis=(1, 2)) * 3 + x[:, :4, :4].mean(axis=(1, 2)))
    return x, y.astype(np.float32)


def sgd_momentum():
    return keras.optimizers.SGD(LEARNING_RATE, momentum=0.9)


def numpy_rebuild(parts, divisor):
    """The rebuild's arithmetic in NumPy float32: one product, one add, k in rank order."""
    u0, v0 = parts[0]
    g = np.zeros((v0.shape[1], u0.shape[1]), u0.dtype)
    for u, v in parts:
        for k in range(u.shape[0]):
            g = g + np.outer(v[k], u[k])
    return g / g.dtype.type(divisor) if divisor != 1 else g


def factors(rank, k, m=70, n=33, dtype=np.float32):
    rng = np.random.default_rng(10 + rank)
    return (rng.normal(size=(k, m)).astype(dtype), rng.normal(size=(k, n)).astype(dtype))


def peer_bytes_sent():
    from tf_ps_ops.common import library as _library

    function = _library.c_api().tfps_peer_bytes_sent
    function.restype = ctypes.c_ulonglong
    return function()


def save(**arrays):
    path = os.path.join(os.environ["TFPS_TEST_OUT"], f"rank{os.environ['TFPS_RANK']}.npz")
    previous = dict(np.load(path)) if os.path.exists(path) else {}
    np.savez(path, **previous, **arrays)


def check_factor_gradient_exact(hvd):
    """K = 32, 32, 7: every worker's G equals the NumPy rebuild bit for bit."""
    me = hvd.rank()
    parts = [factors(r, UNEQUAL_K[r]) for r in range(hvd.size())]
    handle = tf.Variable(tf.zeros([33, 70]))
    u, v = parts[me]
    summed = sfb.factor_gradient(u, v, handle.handle, "exact.sum", average=False)
    np.testing.assert_array_equal(summed.numpy(), numpy_rebuild(parts, 1))
    averaged = tf.function(sfb.factor_gradient)(u, v, handle.handle, "exact.avg")
    np.testing.assert_array_equal(averaged.numpy(), numpy_rebuild(parts, hvd.size()))
    parts64 = [factors(r, UNEQUAL_K[r], m=5, n=40, dtype=np.float64) for r in range(hvd.size())]
    g64 = sfb.factor_gradient(*parts64[me], handle.handle, "exact.f64")
    assert g64.dtype == tf.float64
    np.testing.assert_array_equal(g64.numpy(), numpy_rebuild(parts64, hvd.size()))
    save(**{"exact.avg": averaged.numpy()})


def check_mixed_precision_eager(hvd):
    """float16 compute, eagerly: the factors travel as float32 and the float32 kernel
    gets the average of the workers' gradients."""
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        keras.utils.set_random_seed(11)
        model = keras.Sequential([keras.Input((12,)), sfb.Dense(4, name="mixed")])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    xs = [dataset(8, 12, seed=r)[0] for r in range(hvd.size())]
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(model(xs[hvd.rank()]), tf.float32) ** 2)
    kernel_grad, _ = hvd.DistributedGradientTape(tape).gradient(loss, model.trainable_variables)
    assert kernel_grad.dtype == tf.float32
    w, b = (v.numpy() for v in model.trainable_variables)
    expected = np.mean([x.T @ (2 * (x @ w + b)) for x in xs], axis=0)
    np.testing.assert_allclose(kernel_grad.numpy(), expected, rtol=2e-2, atol=2e-2)


def check_mismatched_factors_fail(hvd):
    u = np.ones((2, 4), np.float32)
    v = np.ones((2, 5 + hvd.rank()), np.float32)
    try:
        sfb.factor_gradient(u, v, tf.Variable(0.0).handle, "mismatch")
    except tf.errors.FailedPreconditionError as error:  # the peer mesh's mismatch class
        assert "'mismatch'" in str(error), error
        return
    raise AssertionError("factors of different widths did not fail")


def _fit(hvd, model, x, y, batch, steps):
    model.compile(optimizer=hvd.DistributedOptimizer(sgd_momentum()), loss="mse",
                  jit_compile=False)
    history = model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0,
                        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    assert int(model.optimizer.iterations) == steps
    return history


def check_sfb_fit(hvd):
    """fit with every Dense layer by SFB; also the same training by push_pull."""
    me = hvd.rank()
    x, y = dataset(FIT_STEPS * NUM_WORKERS * BATCH, 12)
    xs, ys = shard(x, me, FIT_STEPS), shard(y, me, FIT_STEPS)
    plain = mlp(seed=100 + me)  # different on every worker until the broadcast
    initial = plain.get_weights()
    model = sfb.convert(plain)
    assert all(isinstance(layer, sfb.Dense) for layer in model.layers)
    before = peer_bytes_sent()
    _fit(hvd, model, xs, ys, BATCH, FIT_STEPS)
    # Only the factor exchange uses the peer-to-peer path: K·(M+N) floats per layer, step
    # and peer. The biases went through the servers.
    per_step = sum(BATCH * (n + m) * 4 for n, m in ((12, 16), (16, 8), (8, 1)))
    sent = peer_bytes_sent() - before
    assert sent == FIT_STEPS * per_step * (hvd.size() - 1), (sent, per_step)
    reference = mlp(seed=100 + me)
    _fit(hvd, reference, xs, ys, BATCH, FIT_STEPS)
    save(**{f"fit.initial.{i}": w for i, w in enumerate(initial)},
         **{f"fit.sfb.{i}": w for i, w in enumerate(model.get_weights())},
         **{f"fit.push_pull.{i}": w for i, w in enumerate(reference.get_weights())})


def _train_tape(hvd, model, x, y):
    optimizer = sgd_momentum()

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(xb, training=True) - yb) ** 2)
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)

    for k in range(TAPE_STEPS):
        rows = slice(k * len(x) // TAPE_STEPS, (k + 1) * len(x) // TAPE_STEPS)
        step(x[rows], y[rows])
    return model.get_weights()


def check_unequal_batches_tape(hvd):
    """DistributedGradientTape in a tf.function, K = 32, 32, 7 rows per worker and step."""
    me = hvd.rank()
    x, y = dataset(TAPE_STEPS * sum(UNEQUAL_K), 12, seed=7)
    start = sum(UNEQUAL_K[:me]) * TAPE_STEPS
    xs = x[start:start + UNEQUAL_K[me] * TAPE_STEPS]
    ys = y[start:start + UNEQUAL_K[me] * TAPE_STEPS]
    sfb_weights = _train_tape(hvd, sfb.convert(mlp(seed=5)), xs, ys)
    push_pull_weights = _train_tape(hvd, mlp(seed=5), xs, ys)
    save(**{f"tape.sfb.{i}": w for i, w in enumerate(sfb_weights)},
         **{f"tape.push_pull.{i}": w for i, w in enumerate(push_pull_weights)})


def hybrid(hvd, model):
    return sfb.convert(model, mode="hybrid", batch_size=BATCH)


def check_hybrid_conv_fit(hvd):
    """conv + Dense in hybrid mode: fc_big by SFB, conv and the output layer by PS."""
    me = hvd.rank()
    x, y = images(HYBRID_STEPS * NUM_WORKERS * BATCH)
    model = hybrid(hvd, conv_model(seed=3))
    kinds = {layer.name: type(layer) for layer in model.layers}
    assert kinds["fc_big"] is sfb.Dense and kinds["out"] is keras.layers.Dense, kinds
    _fit(hvd, model, shard(x, me, HYBRID_STEPS), shard(y, me, HYBRID_STEPS), BATCH,
         HYBRID_STEPS)
    save(**{f"hybrid.{i}": w for i, w in enumerate(model.get_weights())})


CHECKS = [check_factor_gradient_exact, check_mixed_precision_eager,
          check_mismatched_factors_fail, check_sfb_fit,
          check_unequal_batches_tape, check_hybrid_conv_fit]

if __name__ == "__main__":
    run_checks(CHECKS)

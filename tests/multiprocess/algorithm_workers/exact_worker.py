"""Worker for test_algorithms.py (4 workers): the neighbour exchange op and one averaging
step of each decentralized algorithm against NumPy, with exact arithmetic.

Every worker's tensors are functions of its rank, so each worker computes every other
worker's values and checks its own result itself. Values are multiples of 3 (ring: the
1/3 mix is exact) or of 2 (shift_one: the 1/2 mix is exact) and gradients are integers
times 1/2, so the expected results are exact in float32 and compare with equality.
"""

import ctypes
import os
import sys
import threading
import time

import keras
import numpy as np
import tensorflow as tf

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(_HERE, "..", ".."), os.path.join(_HERE, "..", "workers")]
import codec_reference  # noqa: E402
from harness import run_checks  # noqa: E402

SHAPE = (3, 5)
LR = 0.5
# Bagua's shift_one pairs for 4 ranks, worked out by hand from its schedule:
# lower half r < 2 meets (step + r) % 2 + 2; upper half meets the inverse.
SHIFT_ONE = {0: {0: 2, 1: 3, 2: 0, 3: 1}, 1: {0: 3, 1: 2, 2: 1, 3: 0}}


def ring(r, n):
    return [(r - 1) % n, (r + 1) % n]


def weights_of(r, multiple):
    rng = np.random.default_rng(100 + r)
    return (multiple * rng.integers(-20, 20, SHAPE)).astype(np.float32)


def gradient_of(r):
    rng = np.random.default_rng(200 + r)
    return (rng.integers(-8, 8, SHAPE) / 2).astype(np.float32)


def peer_bytes_sent():
    from tf_ps_ops.common import library as _library

    function = _library.c_api().tfps_peer_bytes_sent
    function.restype = ctypes.c_ulonglong
    return int(function())


def linear_loss(variable, r):
    # d loss / d w = gradient_of(r): the step's gradient is known exactly.
    return tf.reduce_sum(tf.convert_to_tensor(variable) * gradient_of(r))


def check_exchange_sends_only_to_neighbours(hvd):
    from tf_ps_ops.common.library import ops

    r, n = hvd.rank(), hvd.size()
    before = peer_bytes_sent()
    mine = weights_of(r, 1)
    received, sent = ops().ps_neighbour_exchange(mine, ring(r, n), ring(r, n), [],
                                                 tensor_name="exchange.plain")
    np.testing.assert_array_equal(sent, mine)
    np.testing.assert_array_equal(received, np.stack([weights_of(p, 1) for p in ring(r, n)]))
    # Two neighbours of 4 workers: 2 copies left this worker, not the 3 of an allgather.
    assert peer_bytes_sent() - before == 2 * mine.nbytes, peer_bytes_sent() - before
    # Send to one, receive from another: a shift around the ring.
    received, _ = ops().ps_neighbour_exchange(mine, [(r + 1) % n], [(r - 1) % n], [],
                                              tensor_name="exchange.shift")
    np.testing.assert_array_equal(received[0], weights_of((r - 1) % n, 1))


def check_exchange_int8_matches_codec_model(hvd):
    from tf_ps_ops.common.library import ops

    r, n = hvd.rank(), hvd.size()

    def value(p):
        return np.random.default_rng(300 + p).normal(size=(40, 50)).astype(np.float32)

    def model(p):
        x = value(p)
        return codec_reference.decode("int8", codec_reference.encode("int8", x), x.size
                                      ).reshape(x.shape)

    received, sent = ops().ps_neighbour_exchange(value(r), ring(r, n), ring(r, n), [],
                                                 tensor_name="exchange.int8",
                                                 compression="int8")
    np.testing.assert_array_equal(sent, model(r))
    for i, p in enumerate(ring(r, n)):
        np.testing.assert_array_equal(received[i], model(p))


def check_exchange_refuses_bad_ranks(hvd):
    from tf_ps_ops.common.library import ops

    r, n = hvd.rank(), hvd.size()
    for bad in ([r], [n], [-1], [(r + 1) % n, (r + 1) % n]):
        try:
            ops().ps_neighbour_exchange(np.zeros(2, np.float32), bad, [], [],
                                        tensor_name="exchange.bad")
        except tf.errors.InvalidArgumentError as e:
            assert "another worker's rank" in str(e) and "exchange.bad" in str(e), e
        else:
            raise AssertionError(f"send_to={bad} was accepted")


def check_exchange_shape_mismatch_names_the_tensor(hvd):
    from tf_ps_ops.common.library import ops

    r, n = hvd.rank(), hvd.size()
    mine = np.zeros((2, 3 + r % 2), np.float32)  # every ring neighbour has the other shape
    for compression in ("none", "int8"):
        try:
            ops().ps_neighbour_exchange(mine, ring(r, n), ring(r, n), [],
                                        tensor_name=f"exchange.mismatch.{compression}",
                                        compression=compression)
        except tf.errors.FailedPreconditionError as e:  # Horovod's class for a mismatch
            assert f"exchange.mismatch.{compression}" in str(e), e
            assert "the same shape" in str(e), e
        else:
            raise AssertionError(f"shapes that differ were accepted ({compression})")


def check_late_unexpected_part_is_dropped(hvd):
    """Rank 0 sends call 1 of 'exchange.late' to rank 2 after rank 2 finished that call
    expecting nobody: rank 2 drops it with a warning (the test reads its log) instead of
    keeping it forever, and the next call works."""
    from tf_ps_ops.common.library import ops

    r, n = hvd.rank(), hvd.size()
    mine = np.full(3, r, np.float32)
    if r != 0:
        ops().ps_neighbour_exchange(mine, [], [], [], tensor_name="exchange.late")
    _barrier(hvd, "late.before")
    if r == 0:
        ops().ps_neighbour_exchange(mine, [2], [], [], tensor_name="exchange.late")
    _barrier(hvd, "late.after")
    if r in (0, 2):
        received, _ = ops().ps_neighbour_exchange(mine, [2 - r], [2 - r], [],
                                                  tensor_name="exchange.late")
        np.testing.assert_array_equal(received[0], np.full(3, 2 - r, np.float32))
    else:
        ops().ps_neighbour_exchange(mine, [], [], [], tensor_name="exchange.late")


def _one_tape_step(hvd, algorithm, multiple):
    r = hvd.rank()
    w = tf.Variable(weights_of(r, multiple), name="w")
    with tf.GradientTape() as tape:
        loss = linear_loss(w, r)
    tape = hvd.DistributedGradientTape(tape, algorithm=algorithm)
    (grad,) = tape.gradient(loss, [w])
    keras.optimizers.SGD(LR).apply([grad], [w])
    return w.numpy()


def check_ring_mixes_a_third_of_each_neighbour(hvd):
    from tf_ps_ops.algorithms import Decentralized

    r, n = hvd.rank(), hvd.size()
    result = _one_tape_step(hvd, Decentralized("ring"), 3)
    left, right = ring(r, n)
    mix = (weights_of(r, 3) + (weights_of(left, 3) + weights_of(right, 3))) / np.float32(3)
    np.testing.assert_array_equal(result, mix - LR * gradient_of(r))


def check_ring_in_keras_fit_function(hvd):
    """The optimizer wrapper inside a tf.function, as `fit` runs it; 2 steps."""
    from tf_ps_ops.algorithms import Decentralized

    r, n = hvd.rank(), hvd.size()
    w = keras.Variable(weights_of(r, 9), name="w")
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(LR), algorithm=Decentralized("ring"))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = linear_loss(w, r)
        opt.apply(tape.gradient(loss, [w]), [w])

    expected = [weights_of(p, 9) for p in range(n)]
    for _ in range(2):
        step()
        expected = [(x + (expected[(p - 1) % n] + expected[(p + 1) % n])) / np.float32(3)
                    - LR * gradient_of(p) for p, x in enumerate(expected)]
    np.testing.assert_allclose(w.numpy(), expected[r], rtol=1e-6, atol=1e-5)


def check_exchange_does_not_wait_for_backward(hvd):
    """In a traced step (as `fit` runs it) no exchange depends, through data or control
    edges, on an op of the backward pass: TensorFlow may run it while backward computes."""
    from tf_ps_ops.algorithms import Decentralized

    r = hvd.rank()
    layers = [keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)]
    model = keras.Sequential([keras.Input(shape=(4,))] + layers)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(LR), algorithm=Decentralized("ring"))
    x = np.ones((2, 4), np.float32)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x))
        opt.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)

    def backward_ancestors(start):
        seen, todo = set(), [start]
        while todo:
            op = todo.pop()
            for parent in [t.op for t in op.inputs] + list(op.control_inputs):
                if parent.name not in seen:
                    seen.add(parent.name)
                    todo.append(parent)
        return sorted(name for name in seen if name.startswith("gradient_tape/"))

    graph = step.get_concrete_function().graph
    operations = graph.get_operations()
    exchanges = [op for op in operations if op.type == "PsNeighbourExchange"]
    assert len(exchanges) == len(model.trainable_variables), exchanges
    for exchange in exchanges:
        backward = backward_ancestors(exchange)
        assert not backward, f"{exchange.name} waits for {backward[:5]}"
    # The walk does find the backward pass where it is needed: the SGD updates.
    updates = [op for op in operations if op.type == "AssignSubVariableOp"]
    assert updates and all(backward_ancestors(op) for op in updates), updates
    step()  # and it runs


def check_shift_one_follows_bagua_schedule(hvd):
    from tf_ps_ops.algorithms import Decentralized, shift_one_peer

    r, n = hvd.rank(), hvd.size()
    for step in range(4):
        assert shift_one_peer(r, n, step) == SHIFT_ONE[step % 2][r], (step, r)
    algorithm = Decentralized("shift_one")
    w = tf.Variable(weights_of(r, 8), name="w_shift")
    optimizer = keras.optimizers.SGD(LR)
    expected = [weights_of(p, 8) for p in range(n)]
    for step in range(3):
        with tf.GradientTape() as tape:
            loss = linear_loss(w, r)
        (grad,) = hvd.DistributedGradientTape(tape, algorithm=algorithm).gradient(loss, [w])
        optimizer.apply([grad], [w])
        pairs = SHIFT_ONE[step % 2]
        expected = [(x + expected[pairs[p]]) / np.float32(2) - LR * gradient_of(p)
                    for p, x in enumerate(expected)]
        np.testing.assert_array_equal(w.numpy(), expected[r], err_msg=f"step {step}")


def check_interval_skips_steps(hvd):
    from tf_ps_ops.algorithms import Decentralized

    r = hvd.rank()
    algorithm = Decentralized("ring", interval=2)
    w = tf.Variable(weights_of(r, 3), name="w_interval")
    optimizer = keras.optimizers.SGD(LR)
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = linear_loss(w, r)
        optimizer.apply(hvd.DistributedGradientTape(tape, algorithm=algorithm)
                        .gradient(loss, [w]), [w])
    left, right = ring(r, hvd.size())
    mix = (weights_of(r, 3) + (weights_of(left, 3) + weights_of(right, 3))) / np.float32(3)
    # Step 0 averaged; step 1 (odd) only stepped locally.
    np.testing.assert_array_equal(w.numpy(), mix - 2 * LR * gradient_of(r))


def check_low_precision_matches_numpy_model(hvd):
    """Two rounds of int8 difference exchange, against the codec's NumPy model."""
    from tf_ps_ops.algorithms import LowPrecisionDecentralized

    r, n = hvd.rank(), hvd.size()

    def c(x):
        return codec_reference.decode("int8", codec_reference.encode("int8", x), x.size
                                      ).reshape(x.shape)

    def value(p):
        return np.random.default_rng(400 + p).normal(size=SHAPE).astype(np.float32)

    algorithm = LowPrecisionDecentralized()
    w = tf.Variable(value(r), name="w_low")
    optimizer = keras.optimizers.SGD(LR)
    x = [value(p) for p in range(n)]
    x_hat = [np.zeros(SHAPE, np.float32) for _ in range(n)]  # everyone's public copy
    for step in range(2):
        with tf.GradientTape() as tape:
            loss = linear_loss(w, r)
        optimizer.apply(hvd.DistributedGradientTape(tape, algorithm=algorithm)
                        .gradient(loss, [w]), [w])
        diffs = []
        for p in range(n):
            left, right = ring(p, n)
            mix = (x_hat[p] + (x_hat[left] + x_hat[right])) / np.float32(3)
            diffs.append(c(x[p] - x_hat[p] + mix - x_hat[p]))
        x_hat = [x_hat[p] + diffs[p] for p in range(n)]
        x = [x_hat[p] - LR * gradient_of(p) for p in range(n)]
        np.testing.assert_allclose(w.numpy(), x[r], rtol=1e-6, atol=1e-6,
                                   err_msg=f"step {step}")


FUSED_SHAPES = [(3, 5), (7,), (2, 2)]  # 60, 28 and 16 bytes


def _fused_values(r, seed, multiple):
    rng = np.random.default_rng(seed + r)
    return [(multiple * rng.integers(-20, 20, shape)).astype(np.float32)
            for shape in FUSED_SHAPES]


def _fused_gradients(r):
    rng = np.random.default_rng(700 + r)
    return [(rng.integers(-8, 8, shape) / 2).astype(np.float32) for shape in FUSED_SHAPES]


def _fused_tape_step(hvd, algorithm, variables):
    r = hvd.rank()
    with tf.GradientTape() as tape:
        loss = tf.add_n([tf.reduce_sum(tf.convert_to_tensor(v) * g)
                         for v, g in zip(variables, _fused_gradients(r))])
    grads = hvd.DistributedGradientTape(tape, algorithm=algorithm).gradient(loss, variables)
    keras.optimizers.SGD(LR).apply(grads, variables)


def check_fused_ring_matches_numpy(hvd):
    """fusion_bytes packs variables into flat messages; the result is the per-variable
    one: 64 bytes make buckets [w0] and [w1, w2], 1 MB one bucket of all three."""
    from tf_ps_ops.algorithms import Decentralized

    r, n = hvd.rank(), hvd.size()
    left, right = ring(r, n)
    for fusion, buckets in ((64, [[0], [1, 2]]), (1 << 20, [[0, 1, 2]])):
        seed = 500 + fusion % 1000
        variables = [tf.Variable(x, name=f"fused{i}")
                     for i, x in enumerate(_fused_values(r, seed, 3))]
        algorithm = Decentralized("ring", fusion_bytes=fusion)
        before = peer_bytes_sent()
        _fused_tape_step(hvd, algorithm, variables)
        assert algorithm._buckets == buckets, algorithm._buckets
        # The neighbours got every float once (plus message headers), however packed.
        assert peer_bytes_sent() - before >= 2 * 4 * (15 + 7 + 4)
        mine, lefts, rights = (_fused_values(p, seed, 3) for p in (r, left, right))
        for i, v in enumerate(variables):
            mix = (mine[i] + (lefts[i] + rights[i])) / np.float32(3)
            np.testing.assert_array_equal(v.numpy(), mix - LR * _fused_gradients(r)[i],
                                          err_msg=f"variable {i}, fusion_bytes {fusion}")


def check_fused_low_precision_matches_numpy_model(hvd):
    """One int8 round with all variables in one message: the codec sees their
    concatenation (its chunks span variable boundaries)."""
    from tf_ps_ops.algorithms import LowPrecisionDecentralized

    r, n = hvd.rank(), hvd.size()

    def values(p):
        rng = np.random.default_rng(800 + p)
        return [rng.normal(size=shape).astype(np.float32) for shape in FUSED_SHAPES]

    variables = [tf.Variable(x, name=f"fused_low{i}") for i, x in enumerate(values(r))]
    algorithm = LowPrecisionDecentralized(fusion_bytes=1 << 20)
    _fused_tape_step(hvd, algorithm, variables)
    flat = np.concatenate([x.ravel() for x in values(r)])  # x_hat starts at 0: diff = x
    decoded = codec_reference.decode("int8", codec_reference.encode("int8", flat), flat.size)
    start = 0
    for i, v in enumerate(variables):
        size_ = int(np.prod(FUSED_SHAPES[i]))
        part = decoded[start:start + size_].reshape(FUSED_SHAPES[i])
        start += size_
        np.testing.assert_allclose(v.numpy(), part - LR * _fused_gradients(r)[i],
                                   rtol=1e-6, atol=1e-6, err_msg=f"variable {i}")


def _barrier(hvd, name):
    hvd.allreduce(tf.constant([1.0]), name=name)


def _async_threads():
    return [t for t in threading.enumerate() if t.name == "tfps-async-model-average"]


def _wait_until(condition, what, timeout=30):
    limit = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > limit:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def check_async_average_pause_resume_stop(hvd):
    from tf_ps_ops.algorithms import AsyncModelAverage

    r, n = hvd.rank(), hvd.size()
    w = tf.Variable(np.full(SHAPE, float(r), np.float32), name="w_async")
    algorithm = AsyncModelAverage(sync_interval_ms=10)
    if r == 0:
        algorithm.pause()  # before the thread's first round: rank 0 is never written
    algorithm.ensure_built([w], ["async.w"])
    assert len(_async_threads()) == 1
    if r == 0:
        _wait_until(lambda: algorithm.rounds >= 5, "5 rounds")
        np.testing.assert_array_equal(w.numpy(), np.zeros(SHAPE), "written while paused")
        assert algorithm.applied == 0
    _barrier(hvd, "async.paused")
    if r == 0:
        algorithm.resume()
    # With rank 0 written again, rounds pull everyone to one value (no training here).
    _wait_until(lambda: algorithm.applied >= 3, "3 applied rounds")
    _barrier(hvd, "async.resumed")
    values = hvd.allgather(tf.reshape(w, [1, -1])).numpy()
    spread = values.max(axis=0) - values.min(axis=0)
    # From 3 to < 0.5: the averages were applied. (Their mean drifted toward rank 0's
    # value while rank 0 was paused and kept it: pausing is local by design.)
    assert spread.max() < 0.5, spread
    assert np.all((values >= 0) & (values <= n - 1)), values
    algorithm.stop(timeout=60)
    assert not algorithm.running and not _async_threads(), "a thread is left"
    algorithm.stop(timeout=60)  # twice is fine


CHECKS = [check_exchange_sends_only_to_neighbours, check_exchange_int8_matches_codec_model,
          check_exchange_refuses_bad_ranks, check_exchange_shape_mismatch_names_the_tensor,
          check_late_unexpected_part_is_dropped,
          check_ring_mixes_a_third_of_each_neighbour,
          check_ring_in_keras_fit_function, check_exchange_does_not_wait_for_backward,
          check_shift_one_follows_bagua_schedule,
          check_interval_skips_steps, check_low_precision_matches_numpy_model,
          check_fused_ring_matches_numpy, check_fused_low_precision_matches_numpy_model,
          check_async_average_pause_resume_stop]

if __name__ == "__main__":
    run_checks(CHECKS)

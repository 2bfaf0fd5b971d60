"""Worker for test_coll4.py (issue 12): reducescatter that sends each worker only its rows,
Adasum by recursive halving with its gradient, and backward_passes_per_step > 1 together
with algorithm=. Every worker computes every other worker's input (a function of the
rank), so each checks its own result against NumPy or a single-process TensorFlow oracle.
The engine's byte counters say what each worker received."""

import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

from harness import run_checks

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the NumPy models
import adasum_reference  # noqa: E402


def counters():
    from tf_ps_ops.common import library as _library
    api = _library.c_api()
    return np.array([api.tfps_bytes_received(), api.tfps_peer_bytes_received()], np.int64)


def measured(hvd, call):
    """(call's result, [bytes from the servers, bytes from peers] during it). A peer's data
    may arrive as soon as the barrier lets it start, and the next call's only after the
    second barrier, which no worker passes before every one has read its counters."""
    before = counters()
    hvd.barrier()  # through the servers: no peer bytes
    middle = counters()
    out = call()
    after = counters()
    hvd.barrier()
    return out, np.array([after[0] - middle[0], after[1] - before[1]])


def rows_of(rank, size, rows):
    base, extra = divmod(rows, size)
    return rank * base + min(rank, extra), base + (1 if rank < extra else 0)


def value_of(rank, shape, dtype, salt=0):
    rng = np.random.default_rng(1000 * salt + rank)
    if dtype.is_floating:
        return (rng.standard_normal(shape) * (rank + 1)).astype(dtype.as_numpy_dtype)
    return rng.integers(-50, 50, shape).astype(dtype.as_numpy_dtype)


# 1. reducescatter: Horovod's split (earlier ranks get the extra row), slices that are
# empty when there are more ranks than rows, ints and floats, exact against NumPy's sum in
# rank order; and a worker receives its own rows only, from its peers, nothing from the
# servers.
def check_reducescatter_exact_and_only_its_rows(hvd):
    size, me = hvd.size(), hvd.rank()
    for rows, dtypes in ((2 * size + 3, (tf.int32, tf.float64, tf.float16)),
                         (size - 1, (tf.int64, tf.float32)), (1, (tf.float32,))):
        for dtype in dtypes:
            x = [value_of(r, [rows, 3], dtype, salt=rows) for r in range(size)]
            total = x[0].copy()
            for r in range(1, size):
                total = total + x[r]
            start, count = rows_of(me, size, rows)
            out, received = measured(
                hvd, lambda: hvd.reducescatter(tf.constant(x[me]), op=hvd.Sum))
            assert out.dtype == dtype and out.shape == (count, 3), (out.dtype, out.shape)
            np.testing.assert_array_equal(out, total[start:start + count])
            row_bytes = 3 * dtype.size
            # Nothing through the servers; from each peer exactly this worker's rows.
            assert received[0] == 0, f"{received[0]} bytes came from the servers"
            # (and each peer's first dimension, int64, checked against this one's)
            assert received[1] == (size - 1) * (count * row_bytes + 8), (received, count)
            out = hvd.reducescatter(tf.constant(x[me]))  # Average, Horovod's default
            want = total // size if dtype.is_integer else total / np.array(size, total.dtype)
            np.testing.assert_array_equal(out, want[start:start + count])


def check_reducescatter_scaled_and_grouped(hvd):
    size, me = hvd.size(), hvd.rank()
    rows = 2 * size + 1
    x = [value_of(r, [rows, 2], tf.float64, salt=7) for r in range(size)]
    start, count = rows_of(me, size, rows)
    total = x[0].copy()
    for r in range(1, size):
        total = total + x[r]
    out = hvd.reducescatter(tf.constant(x[me]), op=hvd.Sum, prescale_factor=0.5,
                            postscale_factor=3.0, name="rs.scaled")
    np.testing.assert_allclose(out, 3.0 * (0.5 * total)[start:start + count], rtol=1e-15)
    outs = hvd.grouped_reducescatter([tf.constant(x[me]), tf.fill([size + 2], me)],
                                     op=hvd.Sum, name="grs4")
    np.testing.assert_array_equal(outs[0], total[start:start + count])
    s2, c2 = rows_of(me, size, size + 2)
    np.testing.assert_array_equal(outs[1], np.full([c2], sum(range(size)), np.int32))


def check_reducescatter_shape_mismatch(hvd):
    # Different first dimensions: every worker fails at once (FailedPrecondition, as
    # Horovod's mismatches), not only those whose slice came out the wrong size, and
    # the next call works.
    size, me = hvd.size(), hvd.rank()
    rows = 4 if me != size - 1 else 5  # the last worker's extra row lands in rank 0's part
    try:
        hvd.reducescatter(tf.ones([rows, 2]), op=hvd.Sum, name="rs.mismatch")
    except tf.errors.FailedPreconditionError as error:
        assert "first dimensions differ" in str(error) and "[4, " in str(error), error
    else:
        raise AssertionError(f"rank {me}: no FailedPreconditionError")
    out = hvd.reducescatter(tf.ones([size, 2]), op=hvd.Sum, name="rs.mismatch")
    np.testing.assert_array_equal(out, np.full([1, 2], size, np.float32))


def check_reducescatter_gradient(hvd):
    # Horovod 0.28.1's _reducescatter_grad: the allgather of every worker's upstream
    # gradient, multiplied by size for Sum, as it is for Average. With loss_r = (r + 1) *
    # sum(out_r), worker w's gradient on the rows of rank r is (r + 1) (* size for Sum).
    size, me = hvd.size(), hvd.rank()
    rows = 2 * size + 1
    x = tf.Variable(tf.ones([rows, 2], tf.float64) * me)
    for op, factor in ((hvd.Sum, size), (hvd.Average, 1)):
        def grad():
            with tf.GradientTape() as tape:
                out = hvd.reducescatter(x, op=op, name=f"rs4.grad.{op}")
                loss = tf.reduce_sum(out) * (me + 1)
            return tape.gradient(loss, x)

        expected = np.zeros([rows, 2])
        for r in range(size):
            start, count = rows_of(r, size, rows)
            expected[start:start + count] = (r + 1) * factor
        for g in (grad(), tf.function(grad)()):
            np.testing.assert_array_equal(g, expected)


# 2. Adasum: recursive halving / distance doubling. Exact to the NumPy model of Horovod's
# formula; a worker receives about 2 (size - 1) / size of the tensor, not size - 1 times it.
def check_adasum_halving(hvd):
    size, me = hvd.size(), hvd.rank()
    for dtype, shape in ((tf.float64, [37, 11]), (tf.float32, [3])):
        x = [np.random.default_rng(r).standard_normal(shape) * (r + 1) for r in range(size)]
        x[1 % size] = -x[0] * 0.5  # a pair with a negative dot product
        want = adasum_reference.adasum(x).reshape(shape)
        runs = [lambda t: hvd.allreduce(t, op=hvd.Adasum)]
        if dtype == tf.float32:  # traced once: the graph's keys and static segments
            runs.append(tf.function(lambda t: hvd.allreduce(t, op=hvd.Adasum, name="ada4.g")))
        for run in runs:
            out, received = measured(hvd, lambda: run(tf.constant(x[me], dtype)))
            assert out.dtype == dtype
            np.testing.assert_allclose(out, want, rtol=1e-5 if dtype == tf.float32 else 1e-12,
                                       atol=1e-12)
            n = int(np.prod(shape)) * dtype.size  # travels in its own dtype
            levels = size.bit_length() - 1
            # Halving and doubling (one element of rounding per level each way), plus the
            # three dot products per level from each peer.
            bound = 2 * (size - 1) / size * n + 16 * levels + 24 * levels * (size - 1)
            assert received[0] == 0 and received[1] <= bound, (received, bound)
            if size >= 4 and n > 1000:  # gathering every tensor received (size - 1) n
                assert received[1] < (size - 1) * n, (received, (size - 1) * n)


def check_adasum_needs_a_power_of_two(hvd):
    # Horovod's VHDD throws "Running Adasum with non-power-of-two ranks is not supported
    # yet"; so do we, on every member at once (nothing is sent), and the set stays usable.
    size, me = hvd.size(), hvd.rank()
    three = hvd.add_process_set(list(range(size - 1)))
    if three.included():
        try:
            hvd.allreduce(tf.ones([4], tf.float64), op=hvd.Adasum, process_set=three)
        except NotImplementedError as error:
            assert "power-of-two" in str(error) and f"got {size - 1}" in str(error), error
        else:
            raise AssertionError("Adasum over 3 workers did not fail")
        out = hvd.allreduce(tf.ones([4]), op=hvd.Sum, process_set=three)
        np.testing.assert_array_equal(out, np.full([4], size - 1, np.float32))
    hvd.remove_process_set(three)


def check_adasum_gradient(hvd):
    # Horovod 0.28 registers the allreduce's own op for its gradient: the gradient of an
    # Adasum is the Adasum of the upstream gradients.
    size, me = hvd.size(), hvd.rank()
    weights = [np.random.default_rng(50 + r).standard_normal([6]) for r in range(size)]
    want = adasum_reference.adasum(weights)
    x = tf.Variable(np.arange(6, dtype=np.float64))

    def grad():
        with tf.GradientTape() as tape:
            out = hvd.allreduce(x, op=hvd.Adasum, name="adasum4.grad")
            loss = tf.reduce_sum(out * tf.constant(weights[me]))
        return tape.gradient(loss, x)

    for g in (grad(), tf.function(grad)()):
        np.testing.assert_allclose(g, want, rtol=1e-12)


# 3. backward_passes_per_step > 1 with algorithm=: the gradients add up locally, and every
# N-th pass runs one step of the algorithm (here D-PSGD on a ring) on the sums, divided by
# N with average_aggregated_gradients. Oracle: every worker simulated in NumPy.
def check_aggregation_with_algorithm(hvd):
    import keras
    from tf_ps_ops.algorithms import Decentralized

    size, me = hvd.size(), hvd.rank()
    passes, steps, lr = 2, 2, 0.125  # exact in float32 (Keras keeps it so)

    def data(rank, step, p):
        rng = np.random.default_rng(100 * rank + 10 * step + p)
        return rng.standard_normal([5, 3]), rng.standard_normal([5])

    def grad_of(w, a, b):
        return a.T @ (a @ w - b)

    held = [np.full(3, r + 1.0) for r in range(size)]  # each worker starts elsewhere
    for step in range(steps):
        sums = [sum(grad_of(held[r], *data(r, step, p)) for p in range(passes)) / passes
                for r in range(size)]
        mixed = [(held[r] + held[(r - 1) % size] + held[(r + 1) % size]) / 3.0
                 for r in range(size)]
        held = [mixed[r] - lr * sums[r] for r in range(size)]

    w = tf.Variable(np.full(3, me + 1.0))
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(lr), algorithm=Decentralized("ring"),
                                   backward_passes_per_step=passes,
                                   average_aggregated_gradients=True, name="agg.alg")
    for step in range(steps):
        for p in range(passes):
            a, b = data(me, step, p)
            before = w.numpy().copy()
            with tf.GradientTape() as tape:
                loss = 0.5 * tf.reduce_sum(tf.square(tf.linalg.matvec(a, w) - b))
            opt.apply([tape.gradient(loss, w)], [w])
            if p < passes - 1:
                np.testing.assert_array_equal(w.numpy(), before)  # no step between
    np.testing.assert_allclose(w.numpy(), held[me], rtol=1e-12)
    assert int(opt.iterations.numpy()) == steps * passes, opt.iterations
    assert int(opt._tfps_algorithm.step_count.numpy()) == steps
    try:
        hvd.DistributedGradientTape(tf.GradientTape(), algorithm=Decentralized("ring"),
                                    backward_passes_per_step=2)
    except ValueError as error:
        assert "DistributedOptimizer" in str(error), error
    else:
        raise AssertionError("the tape took backward_passes_per_step=2 with an algorithm")


CHECKS = [check_reducescatter_exact_and_only_its_rows,
          check_reducescatter_scaled_and_grouped, check_reducescatter_shape_mismatch,
          check_reducescatter_gradient,
          check_adasum_halving, check_adasum_needs_a_power_of_two,
          check_adasum_gradient, check_aggregation_with_algorithm]

if __name__ == "__main__":
    run_checks(CHECKS)

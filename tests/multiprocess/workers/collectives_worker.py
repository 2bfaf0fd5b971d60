"""Worker for test_collectives.py (issue 12, second slice): Horovod 0.28's collectives
and error behaviour. Every worker computes every other worker's input (a function of the
rank), so each checks its own result against NumPy.

The test runs with TFPS_TIMEOUT far above its own wall-clock limit: a rank that learnt of
an error only by waiting out TFPS_TIMEOUT would fail the test.
"""

import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

from harness import run_checks

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the NumPy models
import adasum_reference  # noqa: E402

ALL_DTYPES = [tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16,
              tf.bfloat16, tf.float32, tf.float64]


def value_of(rank, shape, dtype, salt=0):
    """Rank `rank`'s input: small values, so that sums and products stay exact."""
    rng = np.random.default_rng(1000 * salt + rank)
    if dtype == tf.bool:
        return rng.integers(0, 2, shape).astype(np.bool_)
    low = 0 if dtype in (tf.uint8, tf.uint16) else -4
    x = rng.integers(low, 5, shape)
    return x.astype(np.float32 if dtype == tf.bfloat16 else dtype.as_numpy_dtype)


def tensor_of(rank, shape, dtype, salt=0):
    return tf.cast(tf.constant(value_of(rank, shape, dtype, salt)), dtype)


def as_numpy(t):
    t = tf.convert_to_tensor(t)
    return (tf.cast(t, tf.float32) if t.dtype == tf.bfloat16 else t).numpy()


def expect_failed_precondition(what, call, *names):
    try:
        call()
    except tf.errors.FailedPreconditionError as error:
        for name in names:
            assert name in str(error), f"{what}: the error does not say {name!r}: {error}"
        return
    raise AssertionError(f"{what}: no FailedPreconditionError")


def check_sum_after(hvd, key, step):
    # The next collective under the same key (the eager key when key is None) works.
    out = hvd.allreduce(tf.fill([4], float(hvd.rank() + step)), op=hvd.Sum, name=key)
    expected = sum(r + step for r in range(hvd.size()))
    np.testing.assert_array_equal(out, np.full(4, expected, np.float32))


# Defect 11: a mismatch is reported on every rank at once with Horovod's class, and the
# next collective works.
def check_allreduce_mismatches(hvd):
    me = hvd.rank()
    cases = [
        ("shape", lambda: hvd.allreduce(tf.ones([17 + me] * 3))),
        ("same count, other rank", lambda: hvd.allreduce(
            tf.ones([17, 23 * 57] if me == 0 else [17, 23, 57]))),
        ("dtype", lambda: hvd.allreduce(tf.ones([17] * 3, tf.int32 if me == 0 else tf.float32))),
        # Different numbers of partitions: 2 MB against 2 MB + 4 bytes.
        ("partitions", lambda: hvd.allreduce(tf.ones([(1 << 19) + me]))),
        ("op", lambda: hvd.allreduce(tf.ones([5]), op=hvd.Sum if me == 0 else hvd.Max)),
    ]
    for step, (what, call) in enumerate(cases):
        expect_failed_precondition(what, call, "push_pull.eager")
        check_sum_after(hvd, None, step)
        check_sum_after(hvd, "after.allreduce", step)

    @tf.function
    def graph_reduce(x):
        return hvd.allreduce(x, name="mismatch.graph")

    expect_failed_precondition("tf.function", lambda: graph_reduce(tf.ones([3 + me])),
                               "mismatch.graph")
    np.testing.assert_array_equal(graph_reduce(tf.ones([2])), np.ones(2, np.float32))


def check_op_mismatch_names_both_ops(hvd):
    op = hvd.Min if hvd.rank() == 0 else hvd.Product
    expect_failed_precondition("op", lambda: hvd.allreduce(tf.ones([3]), op=op, name="op.mix"),
                               "min", "product", "'op.mix'")


def check_allgather_mismatches(hvd):
    me = hvd.rank()
    trailing = [17, 10 * (me + 1), 17]
    expect_failed_precondition("trailing dims", lambda: hvd.allgather(tf.ones(trailing)),
                               "allgather.eager")
    expect_failed_precondition(
        "dtype", lambda: hvd.allgather(tf.ones([3], tf.int32 if me == 0 else tf.float32)))
    gathered = hvd.allgather(tf.fill([me + 1], me))
    np.testing.assert_array_equal(gathered, np.repeat(np.arange(hvd.size()),
                                                      np.arange(1, hvd.size() + 1)))


def check_broadcast_mismatches(hvd):
    me = hvd.rank()
    expect_failed_precondition(
        "shape", lambda: hvd.broadcast(tf.ones([17, 10 * (me + 1), 17]), 0), "broadcast.eager")
    expect_failed_precondition(
        "dtype", lambda: hvd.broadcast(tf.ones([17] * 3, tf.int32 if me == 0 else tf.float32), 0))
    np.testing.assert_array_equal(hvd.broadcast(tf.fill([3], float(me)), 1), np.ones(3))


# Defect 3: ranks naming different roots.
def check_broadcast_root_mismatch(hvd):
    me = hvd.rank()
    expect_failed_precondition("root", lambda: hvd.broadcast(tf.ones([17] * 3), me),
                               "root rank", "broadcast.eager")
    expect_failed_precondition(
        "root, named", lambda: hvd.broadcast(tf.ones([4]), me, name="roots"), "'roots'")
    for root in range(hvd.size()):
        out = hvd.broadcast(tf.fill([4], float(me)), root, name="roots")
        np.testing.assert_array_equal(out, np.full(4, float(root), np.float32))


# Defect 6: uint16, int16 and bool.
def check_new_dtypes_allreduce(hvd):
    size = hvd.size()
    for dtype in (tf.uint16, tf.int16):
        x = [value_of(r, [4, 5], dtype) for r in range(size)]
        summed = hvd.allreduce(tf.constant(x[hvd.rank()]), op=hvd.Sum)
        assert summed.dtype == dtype
        np.testing.assert_array_equal(summed, np.sum(x, axis=0, dtype=dtype.as_numpy_dtype))
        averaged = hvd.allreduce(tf.constant(x[hvd.rank()]), op=hvd.Average)
        np.testing.assert_array_equal(
            averaged, np.floor_divide(np.sum(x, axis=0, dtype=np.int64), size).astype(
                dtype.as_numpy_dtype))
    b = [value_of(r, [64], tf.bool) for r in range(size)]
    mine = tf.constant(b[hvd.rank()])
    np.testing.assert_array_equal(hvd.allreduce(mine, op=hvd.Sum), np.logical_or.reduce(b))
    np.testing.assert_array_equal(hvd.allreduce(mine, op=hvd.Max), np.logical_or.reduce(b))
    np.testing.assert_array_equal(hvd.allreduce(mine, op=hvd.Min), np.logical_and.reduce(b))
    np.testing.assert_array_equal(hvd.allreduce(mine, op=hvd.Product),
                                  np.logical_and.reduce(b))
    try:
        hvd.allreduce(mine)  # Average of bools
    except ValueError as error:
        assert "bool" in str(error), error
    else:
        raise AssertionError("op=Average of bools did not fail")


def check_new_dtypes_allgather_and_broadcast(hvd):
    size, me = hvd.size(), hvd.rank()
    for dtype in (tf.uint16, tf.int16, tf.bool):
        parts = [value_of(r, [r + 1, 3], dtype, salt=1) for r in range(size)]
        gathered = hvd.allgather(tf.constant(parts[me]))
        assert gathered.dtype == dtype
        np.testing.assert_array_equal(gathered, np.concatenate(parts))
        for root in range(size):
            x = value_of(me, [2, 3], dtype, salt=2)
            out = hvd.broadcast(tf.constant(x), root)
            np.testing.assert_array_equal(out, value_of(root, [2, 3], dtype, salt=2))


# Min, Max, Product on the servers, every dtype, eagerly and in tf.function.
def check_min_max_product(hvd):
    size, me = hvd.size(), hvd.rank()
    oracles = {hvd.Min: np.minimum.reduce, hvd.Max: np.maximum.reduce,
               hvd.Product: np.multiply.reduce}
    graph = tf.function(lambda x, op: hvd.allreduce(x, op=op, name=f"mmp.{op}"))
    for dtype in ALL_DTYPES:
        x = [value_of(r, [3, 7], dtype, salt=3) for r in range(size)]
        for op, oracle in oracles.items():
            expected = oracle(np.stack(x)).astype(x[0].dtype)
            for run in (lambda t: hvd.allreduce(t, op=op), lambda t: graph(t, op)):
                out = run(tensor_of(me, [3, 7], dtype, salt=3))
                assert out.dtype == dtype, (dtype, out.dtype)
                np.testing.assert_array_equal(as_numpy(out), expected, err_msg=f"{dtype} {op}")
    # Large enough for several partitions on several server threads.
    big = [np.full(300_000, r + 2.0, np.float32) for r in range(size)]
    out = hvd.allreduce(tf.constant(big[me]), op=hvd.Product, name="mmp.big")
    np.testing.assert_array_equal(out, np.multiply.reduce(big))
    scaled = hvd.allreduce(tf.constant([1.0, -3.0]) * (me + 1), op=hvd.Max,
                           prescale_factor=2.0, postscale_factor=0.5)
    np.testing.assert_allclose(scaled, [size, -3.0])


def check_min_max_product_gradient_as_horovod(hvd):
    # Horovod 0.28's gradient of allreduce reduces the upstream gradient with the forward
    # call's op: with upstream w_r on rank r, every rank gets op(w_0, ..., w_{n-1}).
    me, n = hvd.rank(), hvd.size()
    weights = [np.array([1.0 + r, 3.0 - 2 * r, 0.5 * (r + 1)], np.float32) for r in range(n)]
    reduce = {hvd.Min: np.min, hvd.Max: np.max, hvd.Product: np.prod}
    for op, oracle in reduce.items():
        x = tf.Variable([1.0, 2.0, 3.0])
        with tf.GradientTape() as tape:
            y = hvd.allreduce(x, op=op, name=f"grad.op{op}")
            loss = tf.reduce_sum(y * weights[me])
        np.testing.assert_allclose(tape.gradient(loss, x).numpy(),
                                   oracle(np.stack(weights), axis=0), rtol=1e-6)


# alltoall (peer to peer).
def alltoall_oracle(inputs, splits, me):
    """The rows every rank sends `me`, in rank order, and how many from each."""
    parts, counts = [], []
    for r, (x, s) in enumerate(zip(inputs, splits)):
        start = int(np.sum(s[:me]))
        parts.append(x[start:start + s[me]])
        counts.append(s[me])
    return np.concatenate(parts), counts


def check_alltoall(hvd):
    size, me = hvd.size(), hvd.rank()
    # rank r sends (r + p) % 3 rows to rank p: zeros included; plus one unsent row.
    splits = [[(r + p) % 3 for p in range(size)] for r in range(size)]
    for dtype in (tf.float32, tf.int16, tf.bool, tf.float16):
        for trailing in ([], [2], [2, 3]):
            inputs = [value_of(r, [sum(splits[r]) + 1] + trailing, dtype, salt=4)
                      for r in range(size)]
            out, received = hvd.alltoall(tf.constant(inputs[me]), splits[me])
            want, counts = alltoall_oracle(inputs, splits, me)
            assert out.dtype == dtype and received.dtype == tf.int32
            np.testing.assert_array_equal(as_numpy(out), want)
            np.testing.assert_array_equal(received, counts)
    # Equal split, in a tf.function, int64 splits given as a tensor.
    x = np.arange(4 * size * 2).reshape(4 * size, 2) + 100 * me
    fn = tf.function(lambda t, s: hvd.alltoall(t, s, name="a2a.graph"))
    out, received = fn(tf.constant(x), tf.constant([4] * size, tf.int64))
    want = np.concatenate([(np.arange(4 * size * 2).reshape(4 * size, 2) + 100 * r)[4 * me:4 * me + 4]
                           for r in range(size)])
    np.testing.assert_array_equal(out, want)
    out = hvd.alltoall(tf.constant(x))  # no splits: equal parts, the tensor alone (Horovod)
    assert isinstance(out, tf.Tensor), type(out)
    np.testing.assert_array_equal(out, want)


def check_alltoall_one_rank_sends_nothing(hvd):
    size, me = hvd.size(), hvd.rank()
    for silent in range(size):
        splits = [0 if r == silent else r + 1 for r in range(size)]
        rows = 0 if me == silent else (me + 1) * size
        x = tf.fill([rows, 2], float(me))
        out, received = hvd.alltoall(x, [0] * size if me == silent else [me + 1] * size,
                                     name="a2a.silent")
        np.testing.assert_array_equal(received, splits)
        np.testing.assert_array_equal(
            out, np.concatenate([np.full([s, 2], float(r), np.float32)
                                 for r, s in enumerate(splits)]))


def check_alltoall_errors(hvd):
    size, me = hvd.size(), hvd.rank()
    for what, call in [
            ("not a multiple", lambda: hvd.alltoall(tf.ones([size + 1]))),
            ("too many rows", lambda: hvd.alltoall(tf.ones([size - 1]), [1] * size)),
            ("negative", lambda: hvd.alltoall(tf.ones([4]), [-1] + [1] * (size - 1))),
            ("wrong length", lambda: hvd.alltoall(tf.ones([4]), [1] * (size + 1)))]:
        try:
            call()
        except tf.errors.InvalidArgumentError as error:
            assert "alltoall" in str(error), error
        else:
            raise AssertionError(f"{what}: no InvalidArgumentError")
    expect_failed_precondition(
        "dtype", lambda: hvd.alltoall(tf.ones([size], tf.int32 if me % 2 else tf.float32)))
    shape = [2 * size, 10 * (me + 1), 2 * size]
    expect_failed_precondition("trailing dims", lambda: hvd.alltoall(tf.ones(shape)),
                               "alltoall.eager")
    out = hvd.alltoall(tf.fill([size], float(me)))  # and the next one works
    np.testing.assert_array_equal(out, np.arange(size, dtype=np.float32))


def check_alltoall_error_on_one_rank(hvd):
    # Only rank 0's splits are wrong: it gets InvalidArgumentError, the others learn at once
    # (FailedPreconditionError naming rank 0), not after TFPS_TIMEOUT; the next call works.
    size, me = hvd.size(), hvd.rank()
    splits = [3] * size if me == 0 else [1] * size
    try:
        hvd.alltoall(tf.ones([size]), splits, name="a2a.one")
    except tf.errors.InvalidArgumentError as error:
        assert me == 0 and "add up to" in str(error), error
    except tf.errors.FailedPreconditionError as error:
        assert me != 0 and "worker 0 could not take part" in str(error), error
        assert "add up to" in str(error), error  # and says why
    else:
        raise AssertionError("no error")
    out, received = hvd.alltoall(tf.fill([size], float(me)), [1] * size, name="a2a.one")
    np.testing.assert_array_equal(out, np.arange(size, dtype=np.float32))


def check_alltoall_gradient(hvd):
    # loss = sum(w * received), w known per rank: the gradient of each sent row is the
    # receiver's weight for it.
    size, me = hvd.size(), hvd.rank()
    splits = [[(r + p) % 3 + 1 for p in range(size)] for r in range(size)]
    for dtype in (tf.float32, tf.float64):
        x = tf.Variable(tf.cast(tf.fill([sum(splits[me]) + 1, 2], float(me)), dtype))

        def grad():
            with tf.GradientTape() as tape:
                out, _ = hvd.alltoall(x, splits[me], name="a2a.grad")
                weight = tf.cast(tf.range(tf.shape(out)[0]) + 1 + 10 * me, dtype)
                loss = tf.reduce_sum(out * weight[:, None])
            return tape.gradient(loss, x)

        expected = np.zeros([sum(splits[me]) + 1, 2])
        row = 0
        for p in range(size):
            # Receiver p gets my rows after those of ranks < me; its weights count from there.
            offset = sum(splits[r][p] for r in range(me))
            for i in range(splits[me][p]):
                expected[row] = offset + i + 1 + 10 * p
                row += 1
        for g in (grad(), tf.function(grad)()):
            np.testing.assert_allclose(g, expected)


# reducescatter (through the servers).
def rows_of(rank, size, rows):
    base, extra = divmod(rows, size)
    start = rank * base + min(rank, extra)
    return start, base + (1 if rank < extra else 0)


def check_reducescatter(hvd):
    size, me = hvd.size(), hvd.rank()
    for rows in (2 * size, 2 * size + 1, 1):
        for dtype in (tf.float32, tf.int32, tf.float64):
            x = [value_of(r, [rows, 3], dtype, salt=5) for r in range(size)]
            start, count = rows_of(me, size, rows)
            total = np.sum(x, axis=0)
            out = hvd.reducescatter(tf.constant(x[me]), op=hvd.Sum)
            np.testing.assert_array_equal(out, total[start:start + count])
            out = hvd.reducescatter(tf.constant(x[me]))  # op=Average, Horovod's default
            want = total // size if dtype.is_integer else total / size
            np.testing.assert_allclose(out, want[start:start + count], rtol=1e-6)
    got = hvd.grouped_reducescatter([tf.fill([size, 2], float(me)), tf.ones([3 * size])],
                                    op=hvd.Sum, name="grs")
    np.testing.assert_array_equal(got[0], np.full([1, 2], sum(range(size)), np.float32))
    np.testing.assert_array_equal(got[1], np.full([3], size, np.float32))
    try:
        hvd.reducescatter(tf.ones([2]), op=hvd.Max)
    except ValueError as error:
        assert "Average" in str(error), error
    else:
        raise AssertionError("reducescatter op=Max did not fail")


def check_reducescatter_gradient(hvd):
    # Horovod 0.28.1's gradient of out_r = op(x)[rows of r] under sum_r (c_r * out_r): every
    # worker gets each rank's weight c_r on that rank's rows, multiplied by size for Sum
    # (its _reducescatter_grad), not divided for Average.
    size, me = hvd.size(), hvd.rank()
    rows = 2 * size + 1
    x = tf.Variable(tf.ones([rows, 2], tf.float64) * me)
    for op, factor in ((hvd.Sum, size), (hvd.Average, 1)):
        def grad():
            with tf.GradientTape() as tape:
                out = hvd.reducescatter(x, op=op, name=f"rs.grad.{op}")
                loss = tf.reduce_sum(out) * (me + 1)
            return tape.gradient(loss, x)

        expected = np.zeros([rows, 2])
        for r in range(size):
            start, count = rows_of(r, size, rows)
            expected[start:start + count] = (r + 1) * factor
        for g in (grad(), tf.function(grad)()):
            np.testing.assert_allclose(g, expected)


def check_grouped_allgather(hvd):
    size, me = hvd.size(), hvd.rank()
    outs = hvd.grouped_allgather([tf.fill([me + 1], me), tf.fill([1, 2], float(me))])
    np.testing.assert_array_equal(outs[0], np.repeat(np.arange(size), np.arange(1, size + 1)))
    np.testing.assert_array_equal(outs[1], np.repeat(np.arange(size, dtype=np.float32), 2)
                                  .reshape(size, 2))


def check_adasum(hvd):
    size, me = hvd.size(), hvd.rank()
    for dtype in (tf.float32, tf.float64):
        x = [np.random.default_rng(r).standard_normal([4, 5]) * (r + 1) for r in range(size)]
        want = adasum_reference.adasum(x).reshape(4, 5)
        fn = tf.function(lambda t: hvd.allreduce(t, op=hvd.Adasum, name="adasum.graph"))
        for run in (lambda t: hvd.allreduce(t, op=hvd.Adasum), fn):
            out = run(tf.constant(x[me], dtype))
            assert out.dtype == dtype
            np.testing.assert_allclose(out, want, rtol=1e-5 if dtype == tf.float32 else 1e-12)
    try:
        hvd.allreduce(tf.ones([2], tf.int32), op=hvd.Adasum)
    except ValueError as error:
        assert "floating-point" in str(error), error
    else:
        raise AssertionError("an integer Adasum did not fail")


CHECKS = [check_adasum, check_allreduce_mismatches, check_op_mismatch_names_both_ops,
          check_allgather_mismatches, check_broadcast_mismatches, check_broadcast_root_mismatch,
          check_new_dtypes_allreduce, check_new_dtypes_allgather_and_broadcast,
          check_min_max_product, check_min_max_product_gradient_as_horovod, check_alltoall,
          check_alltoall_one_rank_sends_nothing, check_alltoall_errors, check_alltoall_error_on_one_rank,
          check_alltoall_gradient,
          check_reducescatter, check_reducescatter_gradient, check_grouped_allgather]

if __name__ == "__main__":
    run_checks(CHECKS)

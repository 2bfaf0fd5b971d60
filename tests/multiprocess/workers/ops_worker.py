"""Worker for test_ops.py: every collective operation against a NumPy oracle.

Every worker can compute every other worker's input (seeded by rank), so each one checks
the full result itself. Float inputs are multiples of 1/4 small enough that sums are exact
in every dtype, including float16 and bfloat16: sums compare with assert_array_equal.
"""

import keras
import numpy as np
import tensorflow as tf

from harness import env_rank, run_checks

DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int8, tf.uint8, tf.int32,
          tf.int64]
SHAPES = [(), (0,), (2, 0), (7,), (3, 5)]
# Bigger than 3 partitions of TFPS_PARTITION_BYTES=4096 (set by the test), and not a
# multiple of it.
LARGE = [(tf.float32, (50, 100)), (tf.float64, (3, 1001)), (tf.int64, (1700,))]
RTOL = {tf.float16: 1e-3, tf.bfloat16: 1e-2, tf.float32: 1e-6, tf.float64: 1e-12}


def inputs(dtype, shape, seed, size):
    """Every rank's input for one call: [rank 0's, rank 1's, ...]."""
    rng = np.random.default_rng(seed)
    if dtype.is_floating:
        values = rng.integers(-16, 16, (size, *shape)) / 4
    elif dtype == tf.uint8:
        values = rng.integers(0, 10, (size, *shape))
    else:
        values = rng.integers(-10, 10, (size, *shape))
    return [values[r].astype(dtype.as_numpy_dtype) for r in range(size)]


def oracle_sum(values, dtype):
    wide = np.float64 if dtype.is_floating else np.int64
    return np.sum(np.stack(values).astype(wide), axis=0).astype(dtype.as_numpy_dtype)


def assert_average(result, values, dtype):
    total = np.sum(np.stack(values).astype(np.float64 if dtype.is_floating else np.int64), 0)
    if dtype.is_floating:
        np.testing.assert_allclose(np.asarray(result, np.float64), total / len(values),
                                   rtol=RTOL[dtype])
    else:  # documented: integer averages use floor division
        np.testing.assert_array_equal(result, np.floor_divide(total, len(values)))


def assert_sum(result, values, dtype, what):
    assert result.dtype == dtype, f"{what}: dtype {result.dtype}, expected {dtype}"
    assert tuple(result.shape) == values[0].shape, f"{what}: shape {result.shape}"
    np.testing.assert_array_equal(result.numpy(), oracle_sum(values, dtype), err_msg=what)


def check_basics(hvd):
    assert hvd.rank() == env_rank(), (hvd.rank(), env_rank())
    size = hvd.size()
    # All workers run on this host.
    assert (hvd.local_rank(), hvd.local_size()) == (hvd.rank(), size)
    assert int(hvd.rank_op()) == hvd.rank() and int(hvd.size_op()) == size
    assert int(hvd.local_rank_op()) == hvd.local_rank()
    assert int(hvd.local_size_op()) == hvd.local_size()
    assert hvd.is_initialized()
    hvd.init()  # idempotent
    assert hvd.rank() == env_rank()


def check_push_pull_eager(hvd):
    """Default eager key reused across dtypes and shapes: matched by call count."""
    size = hvd.size()
    for seed, (dtype, shape) in enumerate((d, s) for d in DTYPES for s in SHAPES):
        values = inputs(dtype, shape, seed, size)
        mine = tf.constant(values[hvd.rank()])
        assert_sum(hvd.push_pull(mine, average=False), values, dtype, f"{dtype.name}{shape}")
        assert_average(hvd.push_pull(mine).numpy(), values, dtype)
        assert_average(hvd.allreduce(mine).numpy(), values, dtype)


def check_push_pull_tf_function(hvd):
    """In a graph the key comes from the tensor's name; retraced per dtype and shape."""

    @tf.function
    def reduce(x):
        return hvd.push_pull(x, average=False), hvd.allreduce(x, op=hvd.Average)

    size = hvd.size()
    for seed, dtype in enumerate([tf.float16, tf.float32, tf.float64, tf.int32, tf.int64]):
        for shape in [(), (0,), (3, 5)]:
            values = inputs(dtype, shape, 100 + seed, size)
            summed, averaged = reduce(tf.constant(values[hvd.rank()]))
            assert_sum(summed, values, dtype, f"tf.function {dtype.name}{shape}")
            assert_average(averaged.numpy(), values, dtype)


def check_push_pull_large(hvd):
    @tf.function
    def reduce_named(x, name):
        return hvd.push_pull(x, average=False, name=name)

    size = hvd.size()
    for seed, (dtype, shape) in enumerate(LARGE):
        values = inputs(dtype, shape, 200 + seed, size)
        mine = tf.constant(values[hvd.rank()])
        name = f"large.{dtype.name}"
        assert_sum(hvd.push_pull(mine, average=False, name=name), values, dtype, name)
        assert_average(hvd.allreduce(mine, name=name).numpy(), values, dtype)
        assert_sum(reduce_named(mine, name), values, dtype, name + " in tf.function")


def check_allreduce_options(hvd):
    size, me = hvd.size(), hvd.rank()
    values = inputs(tf.float32, (4,), 300, size)
    mine = tf.constant(values[me])
    total = oracle_sum(values, tf.float32)
    np.testing.assert_array_equal(hvd.allreduce(mine, op=hvd.Sum), total)
    np.testing.assert_array_equal(hvd.allreduce(mine, average=False), total)
    scaled = hvd.allreduce(mine, op=hvd.Sum, prescale_factor=2.0, postscale_factor=3.0)
    np.testing.assert_allclose(scaled, 6 * total, rtol=1e-6)
    # Floor division, also for negative sums: -7 // 2 == -4.
    ints = [np.array([5, -7, 1] if r == 0 else [0, 0, 0], np.int32) for r in range(size)]
    averaged = hvd.allreduce(tf.constant(ints[me])).numpy()
    np.testing.assert_array_equal(averaged, np.floor_divide(oracle_sum(ints, tf.int32), size))
    for bad, error in [(dict(op=7), ValueError),  # Adasum is served (test_collectives.py)
                       (dict(op=hvd.Sum, average=True), ValueError)]:
        try:
            hvd.allreduce(mine, **bad)
        except error:
            continue
        raise AssertionError(f"allreduce({bad}) did not raise {error.__name__}")


def check_grouped_allreduce(hvd):
    size, me = hvd.size(), hvd.rank()
    group = [inputs(tf.float32, (3,), 400, size), inputs(tf.int64, (2, 2), 401, size),
             inputs(tf.float64, (), 402, size)]
    mine = [tf.constant(values[me]) for values in group]
    grouped = tf.function(lambda xs: hvd.grouped_allreduce(xs, op=hvd.Sum))
    for results in (hvd.grouped_allreduce(mine, op=hvd.Sum), grouped(mine),
                    hvd.grouped_allreduce(mine, op=hvd.Sum, name="named_group")):
        assert len(results) == len(group)
        for result, values in zip(results, group):
            np.testing.assert_array_equal(result, oracle_sum(values, result.dtype))


def check_compression_fp16(hvd):
    size, me = hvd.size(), hvd.rank()
    # k/8 + 2e-4 with k in 8..63 rounds to k/8 in float16 (half an ulp there is >= 4.9e-4).
    ks = [np.random.default_rng([500, r]).integers(8, 64, 6) for r in range(size)]
    mine = tf.constant(ks[me] / 8 + 2e-4, tf.float32)
    result = hvd.push_pull(mine, average=False, compression=hvd.Compression.fp16)
    assert result.dtype == tf.float32, result.dtype
    np.testing.assert_array_equal(result, np.sum(ks, axis=0) / 8)
    uncompressed = hvd.push_pull(mine, average=False)
    assert not np.array_equal(uncompressed, result), "fp16 compression changed nothing"
    ints = tf.constant([me, 70000], tf.int64)  # integers travel unchanged
    np.testing.assert_array_equal(
        hvd.push_pull(ints, average=False, compression=hvd.Compression.fp16),
        [size * (size - 1) // 2, 70000 * size])


def check_broadcast(hvd):
    size, me = hvd.size(), hvd.rank()
    for root in sorted({0, 1, size - 1}):
        for seed, dtype in enumerate([tf.float32, tf.int64, tf.float16, tf.bfloat16, tf.uint8]):
            for shape in [(), (0,), (4, 3)]:
                values = inputs(dtype, shape, 600 + seed, size)
                out = hvd.broadcast(tf.constant(values[me]), root_rank=root)
                assert out.dtype == dtype
                np.testing.assert_array_equal(out.numpy(), values[root])
        values = inputs(tf.float64, (5,), 620 + root, size)
        out = tf.function(lambda x: hvd.broadcast(x, root))(tf.constant(values[me]))
        np.testing.assert_array_equal(out, values[root])
    for bad_root in (size, -1, 0.5):
        try:
            hvd.broadcast(tf.constant(1.0), root_rank=bad_root)
        except ValueError:
            continue
        raise AssertionError(f"broadcast(root_rank={bad_root}) did not raise ValueError")


def check_broadcast_variables(hvd):
    size, me = hvd.size(), hvd.rank()
    first = inputs(tf.float32, (3, 2), 700, size)
    second = inputs(tf.float64, (4,), 701, size)
    tf_var = tf.Variable(first[me])
    keras_var = keras.Variable(second[me], dtype="float64", name="kv")
    assert hvd.broadcast_variables([tf_var, keras_var], root_rank=1) is None
    np.testing.assert_array_equal(tf_var, first[1])
    np.testing.assert_array_equal(keras_var.numpy(), second[1])

    third = inputs(tf.int32, (2,), 702, size)
    in_place = tf.Variable(third[me])
    returned = hvd.broadcast_(in_place, root_rank=0)
    assert len(returned) == 1 and returned[0] is in_place
    np.testing.assert_array_equal(in_place, third[0])

    fourth = inputs(tf.float32, (5,), 703, size)
    graph_var = tf.Variable(fourth[me])
    @tf.function
    def broadcast_in_graph():
        hvd.broadcast_variables([graph_var], size - 1)

    broadcast_in_graph()
    np.testing.assert_array_equal(graph_var, fourth[size - 1])


def check_allgather(hvd):
    size, me = hvd.size(), hvd.rank()
    cases = [(tf.float32, lambda r: (r, 3)), (tf.int64, lambda r: (r + 1,)),
             (tf.float64, lambda r: (r + 1, 2, 2)), (tf.uint8, lambda r: (2,))]
    gather = tf.function(lambda x: hvd.allgather(x))
    for seed, (dtype, shape_of) in enumerate(cases):
        values = [inputs(dtype, shape_of(r), 800 + 10 * seed + r, size)[r] for r in range(size)]
        expected = np.concatenate(values, axis=0)
        for result in (hvd.allgather(tf.constant(values[me])), gather(tf.constant(values[me]))):
            assert result.dtype == dtype
            np.testing.assert_array_equal(result.numpy(), expected)
    try:
        hvd.allgather(tf.constant(1.0))
    except ValueError:
        return
    raise AssertionError("allgather of a scalar did not raise ValueError")


def check_objects(hvd):
    size, me = hvd.size(), hvd.rank()
    root = 1
    obj = {"from": me, "array": np.arange(me + 3), "text": "ü" * me} if me == root else None
    got = hvd.broadcast_object(obj, root_rank=root)
    assert got["from"] == root and got["text"] == "ü" * root
    np.testing.assert_array_equal(got["array"], np.arange(root + 3))
    assert hvd.broadcast_object(me * 10) == 0  # root_rank defaults to 0
    gathered = hvd.allgather_object(("x" * me, me))
    assert gathered == [("x" * r, r) for r in range(size)], gathered


def check_gradients(hvd):
    size, me = hvd.size(), hvd.rank()
    weights = inputs(tf.float32, (3,), 900, size)
    x = tf.Variable(inputs(tf.float32, (3,), 901, size)[me])
    total = oracle_sum(weights, tf.float32)

    def grads():
        with tf.GradientTape(persistent=True) as tape:
            summed = hvd.push_pull(x, average=False, name="grad.sum")
            averaged = hvd.push_pull(x, name="grad.average")
            broadcast = hvd.broadcast(x, root_rank=1, name="grad.broadcast")
            losses = [tf.reduce_sum(y * weights[me]) for y in (summed, averaged, broadcast)]
        return [tape.gradient(loss, x) for loss in losses]

    for summed, averaged, broadcast in (grads(), tf.function(grads)()):
        np.testing.assert_array_equal(summed, total)
        np.testing.assert_allclose(averaged, total / size, rtol=1e-6)
        # Horovod 0.28: the root gets the average of the upstream gradients.
        np.testing.assert_allclose(broadcast, total / size if me == 1 else np.zeros(3), rtol=1e-6)


def check_indexed_slices(hvd):
    size, me = hvd.size(), hvd.rank()
    table = tf.Variable(tf.zeros((5, 2)))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.gather(table, [me % 5, 4]) * float(me + 1))
    sparse = tape.gradient(loss, table)
    assert isinstance(sparse, tf.IndexedSlices), type(sparse)
    # As Horovod: values and indices allgathered (2 rows per worker, in rank order), the
    # values averaged, the dense_shape kept; its dense form is the average of the tables.
    for reduced in (hvd.allreduce(sparse), tf.function(lambda: hvd.allreduce(sparse))()):
        assert isinstance(reduced, tf.IndexedSlices), type(reduced)
        np.testing.assert_array_equal(reduced.indices,
                                      [i for r in range(size) for i in (r % 5, 4)])
        np.testing.assert_allclose(reduced.values, np.repeat(
            np.arange(1, size + 1, dtype=np.float32), 4).reshape(2 * size, 2) / size,
            rtol=1e-6)
        np.testing.assert_array_equal(reduced.dense_shape, [5, 2])
        expected = np.zeros((5, 2))
        for r in range(size):
            expected[r % 5] += r + 1
            expected[4] += r + 1
        np.testing.assert_allclose(tf.convert_to_tensor(reduced), expected / size, rtol=1e-6)


def check_xla_refused(hvd):
    try:
        tf.function(lambda x: hvd.allreduce(x), jit_compile=True)(tf.ones(2))
    except RuntimeError as error:
        assert "jit_compile=False" in str(error), error
        return
    raise AssertionError("allreduce under jit_compile=True did not raise")


def check_before_init(hvd):
    assert not hvd.is_initialized()
    try:
        hvd.rank()
    except ValueError as error:
        assert "init()" in str(error)
    else:
        raise AssertionError("rank() before init() did not raise")
    try:
        hvd.size_op()
    except tf.errors.FailedPreconditionError:
        return
    raise AssertionError("size_op() before init() did not raise FailedPreconditionError")


BEFORE_INIT = [check_before_init]
CHECKS = [check_basics, check_push_pull_eager, check_push_pull_tf_function,
          check_push_pull_large, check_allreduce_options, check_grouped_allreduce,
          check_compression_fp16, check_broadcast, check_broadcast_variables, check_allgather,
          check_objects, check_gradients, check_indexed_slices, check_xla_refused]

if __name__ == "__main__":
    run_checks(CHECKS, BEFORE_INIT)

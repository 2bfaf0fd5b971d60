"""Process sets, join() and barrier() on 4 workers (test_process_sets.py), each against
NumPy: sets {0, 1} and {2, 3} registered at init, {0, 2} added and removed on the fly."""

import numpy as np
import tensorflow as tf

from harness import env_rank, run_checks

SETS = {}


def _data(rank, dtype=np.float32, n=6):
    return (np.arange(n) % 4 + 1).astype(dtype) * (rank + 1)


def _mine(*names):
    """The registered sets (by name) this worker belongs to."""
    return [(name, SETS[name]) for name in names if env_rank() in SETS[name].ranks]


def check_init_with_static_sets(hvd):
    SETS["01"], SETS["23"] = hvd.ProcessSet([1, 0]), hvd.ProcessSet([2, 3])
    hvd.init(process_sets=[SETS["01"], SETS["23"]])
    assert SETS["01"].ranks == [0, 1] and SETS["01"].process_set_id == 1
    assert SETS["23"].process_set_id == 2
    assert hvd.global_process_set.process_set_id == 0


def check_set_queries(hvd):
    me = hvd.rank()
    for ps in (SETS["01"], SETS["23"]):
        assert ps.size() == 2
        assert ps.included() == (me in ps.ranks)
        assert ps.rank() == (ps.ranks.index(me) if me in ps.ranks else -1)
    assert hvd.global_process_set.size() == 4 and hvd.global_process_set.rank() == me


def check_add_process_set(hvd):
    SETS["02"] = hvd.add_process_set([0, 2])
    assert SETS["02"].process_set_id == 3 and SETS["02"].ranks == [0, 2]
    try:
        hvd.add_process_set(hvd.ProcessSet([2, 0]))  # the same ranks twice
        raise AssertionError("a second set with the same ranks was accepted")
    except ValueError as e:
        assert "already registered" in str(e), e


def _reduce_checks(hvd, name, ps, fn):
    members = ps.ranks
    for dtype in (np.float32, np.int32):
        inputs = [_data(r, dtype) for r in members]
        mine = tf.constant(_data(hvd.rank(), dtype))
        expected = {hvd.Sum: np.sum(inputs, 0), hvd.Max: np.max(inputs, 0),
                    hvd.Min: np.min(inputs, 0), hvd.Product: np.prod(inputs, 0),
                    hvd.Average: (np.sum(inputs, 0) / len(members) if dtype == np.float32
                                  else np.sum(inputs, 0) // len(members))}
        for op, want in expected.items():
            got = fn(mine, op, f"{name}.{np.dtype(dtype).name}.{op}")
            np.testing.assert_array_equal(got.numpy(), want.astype(dtype), err_msg=f"{name} op {op}")


def check_allreduce_per_set(hvd):
    for name, ps in _mine("01", "23", "02"):
        _reduce_checks(hvd, "eager" + name, ps,
                       lambda x, op, key, ps=ps: hvd.allreduce(x, op=op, process_set=ps))
        _reduce_checks(hvd, "named" + name, ps,
                       lambda x, op, key, ps=ps: hvd.allreduce(x, op=op, name=key, process_set=ps))
        fn = tf.function(lambda x, ps=ps: hvd.allreduce(x, op=hvd.Sum, process_set=ps))
        inputs = [_data(r) for r in ps.ranks]
        np.testing.assert_array_equal(fn(tf.constant(_data(hvd.rank()))).numpy(),
                                      np.sum(inputs, 0))
        grouped = hvd.grouped_allreduce([tf.constant(_data(hvd.rank())), tf.ones([2])],
                                        op=hvd.Sum, process_set=ps)
        np.testing.assert_array_equal(grouped[0].numpy(), np.sum(inputs, 0))
        np.testing.assert_array_equal(grouped[1].numpy(), [2.0, 2.0])


def check_allgather_per_set(hvd):
    for name, ps in _mine("01", "23", "02"):
        rows = [np.full([r + 1, 2], r, np.float32) for r in ps.ranks]
        got = hvd.allgather(tf.constant(rows[ps.rank()]), process_set=ps)
        np.testing.assert_array_equal(got.numpy(), np.concatenate(rows))
        flags = [np.array([r % 2 == 0] * (r + 1)) for r in ps.ranks]
        got = hvd.allgather(tf.constant(flags[ps.rank()]), process_set=ps)
        np.testing.assert_array_equal(got.numpy(), np.concatenate(flags))
        # Horovod 0.28's gradient: the upstream gradient averaged over the set, my rows.
        x = tf.Variable(rows[ps.rank()])
        with tf.GradientTape() as tape:
            y = hvd.allgather(x, process_set=ps)
            loss = tf.reduce_sum(y * tf.range(1.0, tf.cast(tf.shape(y)[0], tf.float32) + 1)[:, None])
        start = sum(r + 1 for r in ps.ranks[:ps.rank()])
        want = np.repeat(np.arange(start + 1, start + hvd.rank() + 2, dtype=np.float32)[:, None],
                         2, 1)
        np.testing.assert_allclose(tape.gradient(loss, x).numpy(), want)


def check_broadcast_per_set(hvd):
    for name, ps in _mine("01", "23", "02"):
        for root in ps.ranks:
            got = hvd.broadcast(tf.constant(_data(hvd.rank())), root, process_set=ps)
            np.testing.assert_array_equal(got.numpy(), _data(root))
        obj = hvd.broadcast_object({"from": hvd.rank()}, ps.ranks[-1], process_set=ps)
        assert obj == {"from": ps.ranks[-1]}, obj
        assert hvd.allgather_object(hvd.rank(), process_set=ps) == ps.ranks


def check_alltoall_and_reducescatter_per_set(hvd):
    for name, ps in _mine("01", "23", "02"):
        me = ps.rank()
        # member i sends i + j + 1 rows of value 10 * rank + j to member j
        sent = [np.full([me + j + 1, 1], 10 * hvd.rank() + j, np.int32) for j in range(2)]
        got, splits = hvd.alltoall(tf.constant(np.concatenate(sent)), splits=[me + 1, me + 2],
                                   process_set=ps)
        want = np.concatenate([np.full([i + me + 1, 1], 10 * r + me, np.int32)
                               for i, r in enumerate(ps.ranks)])
        np.testing.assert_array_equal(got.numpy(), want)
        np.testing.assert_array_equal(splits.numpy(), [me + 1, me + 2])
        inputs = [np.arange(10, dtype=np.float32).reshape(5, 2) * (r + 1) for r in ps.ranks]
        got = hvd.reducescatter(tf.constant(inputs[me]), op=hvd.Average, process_set=ps)
        rows = [0, 3, 5]  # Horovod's split of 5 rows over 2 members
        np.testing.assert_allclose(got.numpy(), (np.sum(inputs, 0) / 2)[rows[me]:rows[me + 1]])


def check_wrappers_per_set(hvd):
    for name, ps in _mine("01", "23"):
        w = tf.Variable([1.0, 2.0])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * float(hvd.rank() + 1))
        grad = hvd.DistributedGradientTape(tape, process_set=ps).gradient(loss, [w])[0]
        np.testing.assert_allclose(grad.numpy(), [np.mean([r + 1 for r in ps.ranks])] * 2)
        import keras
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), process_set=ps,
                                       name=f"set{name}")
        v = keras.Variable([0.0, 0.0], name=f"v{name}")
        opt.apply([tf.constant([float(hvd.rank()), 1.0])], [v])
        np.testing.assert_allclose(v.numpy(), [-np.mean(ps.ranks), -1.0])


def check_non_member_gets_value_error(hvd):
    other = SETS["23"] if hvd.rank() < 2 else SETS["01"]
    calls = [lambda: hvd.allreduce(tf.ones([2]), process_set=other),
             lambda: hvd.allgather(tf.ones([2]), process_set=other),
             lambda: hvd.broadcast(tf.ones([2]), other.ranks[0], process_set=other),
             lambda: hvd.alltoall(tf.ones([2]), process_set=other),
             lambda: hvd.reducescatter(tf.ones([2]), process_set=other),
             lambda: hvd.barrier(process_set=other)]
    for call in calls:
        try:
            call()
            raise AssertionError("a collective of a set this worker is not in ran")
        except ValueError as e:
            assert f"rank {hvd.rank()}" in str(e) and "not a member" in str(e), e


def check_push_claiming_a_foreign_set_is_refused(hvd):
    # Past the Python check, as a mistaken or hostile worker would: the server refuses it
    # alone, naming the worker and the set, and the set's own rounds go on.
    from tf_ps_ops.common import library as _library
    if hvd.rank() == 2:
        try:
            _library.ops().ps_push_pull(tf.ones([3]), [], tensor_name="hostile",
                                        process_set=[0, 1])
            raise AssertionError("the server accepted a push from outside its set")
        except tf.errors.InvalidArgumentError as e:
            assert "worker 2" in e.message and "{0, 1}" in e.message and \
                "not a member" in e.message, e.message
    if hvd.rank() == 3:
        try:
            _library.ops().ps_push_pull(tf.ones([3]), [], tensor_name="hostile", process_set=[3, 7])
            raise AssertionError("the server accepted a set naming a rank that is not a worker")
        except tf.errors.InvalidArgumentError as e:
            assert "rank 7 is not a worker" in e.message, e.message
    for name, ps in _mine("01"):
        got = hvd.allreduce(tf.ones([3]), op=hvd.Sum, name="hostile", process_set=ps)
        np.testing.assert_array_equal(got.numpy(), [2, 2, 2])


def check_remove_process_set(hvd):
    ps = SETS.pop("02")
    assert hvd.remove_process_set(ps) is True
    assert ps.process_set_id is None
    assert hvd.remove_process_set(hvd.global_process_set) is False
    try:
        hvd.allreduce(tf.ones([1]), process_set=ps)
        raise AssertionError("a removed set still works")
    except ValueError as e:
        assert "not registered" in str(e), e


def check_ranks_that_disagree_get_value_error(hvd):
    try:
        hvd.add_process_set([0, 1, 2] if hvd.rank() != 3 else [1, 2, 3])
        raise AssertionError("workers registered different sets")
    except ValueError as e:
        assert "disagree" in str(e) and "worker 3" in str(e), e


def check_barrier(hvd):
    hvd.barrier()
    for name, ps in _mine("01", "23"):
        hvd.barrier(process_set=ps)
        tf.function(lambda ps=ps: hvd.barrier(process_set=ps))()  # a graph's barrier op


def check_join_with_uneven_data(hvd):
    steps = [5, 3, 4, 6]  # rank 3 has the most data, so it joins last
    me = hvd.rank()
    for step in range(steps[me]):
        x = tf.fill([3], float((step + 1) * (me + 1)))
        avg = hvd.allreduce(x, op=hvd.Average, name="join.avg")
        total = hvd.allreduce(tf.cast(x, tf.int32), op=hvd.Sum, name="join.sum")
        biggest = hvd.allreduce(x, op=hvd.Min, name="join.min")
        working = [r for r in range(4) if steps[r] > step]
        contributions = [(step + 1) * (r + 1) for r in working]
        # Horovod: a joined worker contributes zeros; Average divides by size()
        np.testing.assert_allclose(avg.numpy(), [sum(contributions) / 4.0] * 3)
        np.testing.assert_array_equal(total.numpy(), [sum(contributions)] * 3)
        want_min = min(contributions) if len(working) == 4 else 0.0
        np.testing.assert_array_equal(biggest.numpy(), [want_min] * 3)
    last = hvd.join()
    assert int(last) == 3, int(last)
    # The job goes on after everyone has joined, under the same names too: the servers
    # keep the early joiners' call counts in step with the others'.
    for name in ("join.avg", "join.sum", "after.join"):
        np.testing.assert_array_equal(
            hvd.allreduce(tf.ones([2]) * (me + 1), op=hvd.Sum, name=name).numpy(), [10, 10])
    np.testing.assert_array_equal(hvd.allreduce(tf.ones([2]), op=hvd.Sum).numpy(), [4, 4])


BEFORE_INIT = [check_init_with_static_sets]
CHECKS = [check_set_queries, check_add_process_set, check_allreduce_per_set,
          check_allgather_per_set, check_broadcast_per_set,
          check_alltoall_and_reducescatter_per_set, check_wrappers_per_set,
          check_non_member_gets_value_error, check_push_claiming_a_foreign_set_is_refused,
          check_remove_process_set, check_ranks_that_disagree_get_value_error, check_barrier,
          check_join_with_uneven_data]

if __name__ == "__main__":
    run_checks(CHECKS, before_init=BEFORE_INIT)

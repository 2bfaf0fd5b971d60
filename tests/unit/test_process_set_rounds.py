"""A server thread's rounds with process sets and join() (ps_server/process_sets.*,
SumRounds::OnJoin), fed real head frames without a network, against NumPy: a set's round
completes with its members only; a push from outside the set, or naming a rank that is not
a worker, is refused alone; pushes naming different sets fail the round; a lost worker
fails only its sets' rounds; a joined worker counts as zeros (Average's divisor stays the
set size on the worker), min includes them, join answers the last rank, and the early
joiner's later pushes are kept in step."""

import numpy as np
import pytest

from native import load_core, load_server_testing

core = load_core()
ps_testing = load_server_testing()
T = core.MSG_TYPES
F32 = core.wire_dtype(np.dtype(np.float32))
I32 = core.wire_dtype(np.dtype(np.int32))
MIN = 1


def push(store, sender, values, step=1, name="w", members=None, reduce_op=0):
    values = np.asarray(values, np.float32)
    fields = dict(type=T["PUSH_PULL"], key=core.key_of_name(name), partition=0, num_partitions=1,
                  step=step, dtype=F32, sender=sender, count=values.size,
                  total_count=values.size, reduce_op=reduce_op)
    if members is not None:
        fields.update(flags=core.FLAG_PROCESS_SET, members=members)
    return store.push(core.encode_head(fields, [values.size]), values.tobytes())


def join(store, sender, step=1):
    fields = dict(type=T["JOIN"], key=core.key_of_name("tfps.join"), partition=0,
                  num_partitions=1, step=step, dtype=I32, sender=sender, count=1,
                  total_count=1)
    return store.push(core.encode_head(fields, [1]), np.int32(sender).tobytes())


def sums(replies):
    return {rank: np.frombuffer(payload, np.float32) for rank, _, _, error, payload in replies
            if error is None}


def test_a_sets_round_completes_with_its_members():
    store = ps_testing.RoundsKeyStore(4)
    assert push(store, 0, [1, 2], members=[0, 2]) == []
    replies = push(store, 2, [10, 20], members=[0, 2])
    assert sorted(sums(replies)) == [0, 2]
    np.testing.assert_array_equal(sums(replies)[0], [11, 22])


def test_a_push_from_outside_the_set_is_refused_alone():
    store = ps_testing.RoundsKeyStore(4)
    push(store, 0, [1], members=[0, 1])
    [(rank, _, _, error, _)] = push(store, 3, [5], members=[0, 1])
    assert rank == 3 and "worker 3 pushed for process set {0, 1}" in error
    [(rank, _, _, error, _)] = push(store, 3, [5], members=[0, 3])  # claims a set of its own
    assert rank == 3 and "round of process set {0, 1}" in error
    [(rank, _, _, error, _)] = push(store, 2, [5], members=[2, 9])
    assert rank == 2 and "rank 9 is not a worker" in error
    np.testing.assert_array_equal(sums(push(store, 1, [2], members=[0, 1]))[1], [3])


def test_members_that_disagree_fail_the_round():
    store = ps_testing.RoundsKeyStore(3)
    push(store, 0, [1], members=[0, 1])
    replies = push(store, 1, [1], members=[0, 1, 2])
    assert sorted(r[0] for r in replies) == [0, 1]
    assert all("disagree on the process set" in r[3] for r in replies)


def test_a_lost_worker_fails_only_its_sets_rounds():
    store = ps_testing.RoundsKeyStore(4)
    push(store, 0, [1], name="a", members=[0, 1])
    push(store, 2, [1], name="b", members=[2, 3])
    failed = store.lose(1)
    assert [(r[0], "worker 1 is gone" in r[3]) for r in failed] == [(0, True)]
    np.testing.assert_array_equal(sums(push(store, 3, [4], name="b", members=[2, 3]))[3], [5])


def test_a_timeout_names_only_missing_members():
    store = ps_testing.RoundsKeyStore(4, 1.0)
    push(store, 2, [1], members=[1, 2])
    [(rank, _, _, error, _)] = store.tick(5.0)
    assert rank == 2 and "but not by rank(s) 1, which are alive" in error
    assert "TFPS_STALL_SHUTDOWN" in error and "submitted by rank(s) 2 " in error


def test_a_stalled_round_warns_every_period_and_never_fails_by_default():
    store = ps_testing.RoundsKeyStore(4, 0.0, 10.0)
    push(store, 2, [1], members=[1, 2])
    push(store, 3, [1], step=2)
    assert store.tick(5.0) == [] and store.take_warnings() == []
    assert store.tick(25.0) == []
    warnings = store.take_warnings()
    assert len(warnings) == 2, warnings  # one per (submitted, missing)
    by_missing = {w.split("missing rank(s) ")[1].split(",")[0]: w for w in warnings}
    assert set(by_missing) == {"1", "0"}, warnings
    w = by_missing["1"]
    assert w.startswith("stall warning: tensor 0x") and "has waited 25 s" in w, w
    assert "submitted by rank(s) 2;" in w, w
    assert "submitted by rank(s) 3; missing rank(s) 0, 1, 2," in by_missing["0"], warnings
    assert store.tick(26.0) == [] and store.take_warnings() == []  # once per period
    assert store.tick(3600.0) == [] and len(store.take_warnings()) == 2
    # The missing member completes the round: the sum, as if nothing happened.
    np.testing.assert_array_equal(sums(push(store, 1, [2], members=[1, 2]))[2], [3])


def test_a_joined_worker_counts_as_zeros_and_join_answers_the_last():
    store = ps_testing.RoundsKeyStore(3)
    np.testing.assert_array_equal(sums(push(store, 0, [1, 1]) + push(store, 1, [2, 2]) +
                                       push(store, 2, [3, 3]))[0], [6, 6])
    push(store, 0, [1, 1], step=2)              # worker 2 runs out of data
    assert join(store, 2) == []
    replies = push(store, 1, [2, 2], step=2)    # the open round completes without it
    assert sorted(sums(replies)) == [0, 1]
    np.testing.assert_array_equal(sums(replies)[0], [3, 3])
    push(store, 0, [5, 7], step=3, reduce_op=MIN)  # new rounds too; min sees its zeros
    np.testing.assert_array_equal(sums(push(store, 1, [4, 9], step=3, reduce_op=MIN))[1], [0, 0])
    assert join(store, 0) == []
    replies = push(store, 1, [1, 1], step=4)    # only worker 1 still works
    np.testing.assert_array_equal(sums(replies)[1], [1, 1])
    answers = join(store, 1)
    assert sorted(r[0] for r in answers) == [0, 1, 2]
    assert all(np.frombuffer(r[4], np.int32)[0] == 1 for r in answers)
    # Everyone goes on under the same name: worker 2 (3 rounds counted while joined) and
    # worker 0 (1 round) push with their own counts and get answers under them.
    push(store, 2, [1, 1], step=2)
    push(store, 0, [1, 1], step=4)
    replies = push(store, 1, [1, 1], step=5)
    assert {r[0]: r[2] for r in replies} == {0: 4, 1: 5, 2: 2}
    np.testing.assert_array_equal(sums(replies)[2], [3, 3])


def test_join_twice_and_join_timeout():
    store = ps_testing.RoundsKeyStore(3, 1.0)
    join(store, 0)
    [(rank, _, _, error, _)] = join(store, 0)
    assert rank == 0 and "join() twice" in error
    [(rank, _, _, error, _)] = store.tick(5.0)
    assert rank == 0 and "join()" in error and "but not by rank(s) 1, 2" in error
    join(store, 1)  # forgotten after the timeout: a fresh join starts
    assert store.lose(2)[0][3].startswith("join(): worker 2 is gone")


def test_a_set_round_counts_a_joined_member():
    store = ps_testing.RoundsKeyStore(4)
    join(store, 3)
    np.testing.assert_array_equal(sums(push(store, 2, [1], members=[2, 3]))[2], [1])

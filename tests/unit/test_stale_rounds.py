"""ssp/asp on one server thread, push by push (ps_server/clocks.h, stale_rounds.h, through
the test binding's StaleKeyStore): when reads leave, what they carry, and how they fail.
Oracle: one-hot pushes (worker r, step s sets element r*STEPS + s - 1), so a read's value
says exactly which pushes it carries; SSP's definition says which it must."""

import numpy as np
import pytest

from native import load_server_testing

testing = load_server_testing()
W, STEPS, KEY = 3, 10, 77


def onehot(rank, step):
    v = np.zeros(W * STEPS, np.float32)
    v[rank * STEPS + step - 1] = 1
    return v


def replies_by_rank(replies):
    out = {}
    for rank, step, value in replies:
        assert not isinstance(value, str), value
        out.setdefault(rank, []).append((step, value))
    return out


def test_ssp_read_waits_for_the_slowest_and_leaves_when_it_catches_up():
    store = testing.StaleKeyStore(W, "ssp:2")
    # Workers 0 and 1 run 4 steps; worker 2 has done none.
    got = []
    for step in range(1, 5):
        for rank in (0, 1):
            got += store.push(rank, KEY, 0, step, onehot(rank, step))
    left = replies_by_rank(got)
    # Steps 1 and 2 need the slowest at step >= 0: they left; 3 and 4 wait.
    assert [s for s, _ in left[0]] == [1, 2] and [s for s, _ in left[1]] == [1, 2]
    # Worker 2 pushes step 1: reads of step 3 (needing 1) leave; step 4 (needing 2) waits.
    got = replies_by_rank(store.push(2, KEY, 0, 1, onehot(2, 1)))
    assert sorted(got) == [0, 1, 2]
    assert [s for s, _ in got[0]] == [3] and [s for s, _ in got[1]] == [3]
    # Worker 0's read of step 3 carries every push it was not yet sent, its own included.
    seen0 = sum(v for _, v in left[0]) + got[0][0][1]
    assert seen0.reshape(W, STEPS)[2, 0] == 1, "worker 2's step 1 is missing"
    assert seen0.reshape(W, STEPS)[0, 2] == 1, "its own step 3 is missing"
    assert np.all((seen0 == 0) | (seen0 == 1))
    got = replies_by_rank(store.push(2, KEY, 0, 2, onehot(2, 2)))
    assert [s for s, _ in got[0]] == [4] and [s for s, _ in got[1]] == [4]


def test_asp_answers_at_once_and_every_push_reaches_every_worker_once():
    store = testing.StaleKeyStore(W, "asp")
    seen = np.zeros((W, W * STEPS), np.float32)
    order = [(r, s) for s in range(1, STEPS + 1) for r in (0, 1)] + \
            [(2, s) for s in range(1, STEPS + 1)]
    for rank, step in order:
        replies = store.push(rank, KEY, 0, step, onehot(rank, step))
        assert len(replies) == 1 and replies[0][0] == rank and replies[0][1] == step
        seen[rank] += replies[0][2]
    # The slow worker read everything; the fast ones everything that came before their reads.
    np.testing.assert_array_equal(seen[2], np.ones(W * STEPS))
    for rank in (0, 1):
        assert np.all((seen[rank] == 0) | (seen[rank] == 1))
        assert seen[rank].reshape(W, STEPS)[1 - rank].sum() >= STEPS - 1


def test_integer_and_ps_pushes():
    store = testing.StaleKeyStore(2, "asp")
    store.init(5, 0, np.array([10.0, 10.0], np.float32))
    (rank, step, value), = store.push(1, 5, 0, 2, np.array([3.0, 6.0], np.float32), ps=True,
                                      lr=1.0)
    # SGD over 2 workers: one worker's gradient moves the parameter by lr * g / 2, at once.
    np.testing.assert_allclose(value, [8.5, 7.0])
    (_, _, value), = store.push(0, 5, 0, 2, np.array([1.0, 0.0], np.float32), ps=True, lr=1.0)
    np.testing.assert_allclose(value, [8.0, 7.0])


def test_ssp_ps_read_answers_the_parameter_as_it_is_when_it_leaves():
    store = testing.StaleKeyStore(2, "ssp:1")
    store.init(5, 0, np.array([0.0], np.float32))
    g = np.array([2.0], np.float32)
    assert len(store.push(0, 5, 0, 2, g, ps=True, lr=1.0)) == 1   # needs min clock >= 1
    assert store.push(0, 5, 0, 3, g, ps=True, lr=1.0) == []       # needs 2: waits
    got = store.push(1, 5, 0, 2, g, ps=True, lr=1.0)
    # Worker 1's own read and worker 0's waiting one, both after all three updates.
    assert sorted((r, s) for r, s, _ in got) == [(0, 3), (1, 2)]
    for _, _, value in got:
        np.testing.assert_allclose(value, [-3.0])


def test_ssp_sparse_ps_read_answers_its_rows_as_they_are_when_it_leaves():
    store = testing.StaleKeyStore(2, "ssp:1")
    store.init(6, 0, np.zeros(4 * 2, np.float32))  # a [4, 2] table
    one = np.ones((1, 2), np.float32)
    assert len(store.push_sparse(0, 6, 2, 4, [1], one, lr=1.0)) == 1
    assert store.push_sparse(0, 6, 3, 4, [1], one, lr=1.0) == []   # waits for worker 1
    got = store.push_sparse(1, 6, 2, 4, [1, 3], np.ones((2, 2), np.float32), lr=1.0)
    by_rank = {rank: value.tobytes() for rank, _, value in got}
    # Worker 0's waiting read: row 1 after all three updates of it (-1/2 each).
    ids = np.frombuffer(by_rank[0][:8], np.int64)
    np.testing.assert_array_equal(ids, [1])
    np.testing.assert_allclose(np.frombuffer(by_rank[0][8:], np.float32), [-1.5, -1.5])
    # Worker 1's: its rows 1 and 3.
    ids = np.frombuffer(by_rank[1][:16], np.int64)
    np.testing.assert_array_equal(ids, [1, 3])
    np.testing.assert_allclose(np.frombuffer(by_rank[1][16:], np.float32),
                               [-1.5, -1.5, -0.5, -0.5])


def test_a_read_blocked_by_a_lost_worker_fails_at_once_naming_it():
    store = testing.StaleKeyStore(W, "ssp:1")
    for rank in range(W):
        store.push(rank, KEY, 0, 1, onehot(rank, 1))
    store.push(0, KEY, 0, 2, onehot(0, 2))             # leaves (needs 1)
    assert store.push(0, KEY, 0, 3, onehot(0, 3)) == []  # needs every worker at step 2
    store.push(1, KEY, 0, 2, onehot(1, 2))
    (rank, step, error), = store.lose(2)
    assert (rank, step) == (0, 3)
    assert "worker 2 (at step 1, gone: killed by the test)" in error and "ssp:1" in error
    # A later read the lost worker blocks fails as soon as it is queued.
    (rank, step, error), = store.push(1, KEY, 0, 3, onehot(1, 3))
    assert (rank, step) == (1, 3) and "worker 2" in error


def test_a_read_blocked_by_a_slow_worker_fails_after_the_timeout_naming_it():
    store = testing.StaleKeyStore(2, "ssp:1", stall_shutdown_s=5.0)
    store.push(0, KEY, 0, 1, onehot(0, 1))
    store.push(0, KEY, 0, 2, onehot(0, 2))
    assert store.tick(1.0) == []
    (rank, step, error), = store.tick(6.0)
    assert (rank, step) == (0, 2)
    assert "TFPS_STALL_SHUTDOWN" in error and "worker 1 (at step 0)" in error


def test_a_read_blocked_by_a_slow_worker_waits_with_warnings_by_default():
    store = testing.StaleKeyStore(2, "ssp:1", stall_warning_s=2.0)
    store.push(0, KEY, 0, 1, onehot(0, 1))
    store.push(0, KEY, 0, 2, onehot(0, 2))
    assert store.tick(3600.0) == []  # an hour: still waiting (slow is not dead)
    replies = store.push(1, KEY, 0, 1, onehot(1, 1))  # the slow one catches up
    assert (0, 2) in [(rank, step) for rank, step, _ in replies], replies


def test_broadcasts_stay_bsp_under_asp():
    store = testing.StaleKeyStore(2, "asp")
    assert store.push(0, 9, 0, 1, np.array([1.0], np.float32), broadcast=True) == []
    got = store.push(1, 9, 0, 1, np.array([2.0], np.float32), broadcast=True)
    assert sorted(r for r, _, _ in got) == [0, 1]
    for _, _, value in got:
        np.testing.assert_allclose(value, [3.0])


def test_a_push_that_disagrees_is_refused_alone():
    store = testing.StaleKeyStore(2, "asp")
    store.push(0, KEY, 0, 1, np.zeros(4, np.float32))
    (rank, _, error), = store.push(1, KEY, 0, 1, np.zeros(5, np.float32))
    assert rank == 1 and "disagrees with worker 0's first push" in error


def test_a_repeated_or_older_step_is_refused_and_changes_nothing():
    store = testing.StaleKeyStore(2, "asp")
    store.push(0, KEY, 0, 1, np.ones(4, np.float32))
    store.push(0, KEY, 0, 2, np.ones(4, np.float32))
    for step in (2, 1):
        (rank, _, error), = store.push(0, KEY, 0, step, np.ones(4, np.float32))
        assert rank == 0 and f"pushed step {step} after step 2" in error
    # Worker 1's first read carries worker 0's two pushes and its own: nothing more.
    (_, _, value), = store.push(1, KEY, 0, 1, np.ones(4, np.float32))
    np.testing.assert_array_equal(value, np.full(4, 3.0))


def test_bad_consistency_is_refused():
    with pytest.raises(ValueError, match="is not bsp, asp or ssp:S"):
        testing.StaleKeyStore(2, "ssp:-1")

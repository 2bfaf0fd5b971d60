"""join() under hierarchical aggregation, on the server (SumRounds::OnJoin,
docs/hierarchical.md "join()"), fed real head frames without a network, against NumPy, and
the two join flags on the wire (protocol 5: kFlagJoinLeads, bit 10; kFlagJoinRelease, bit 12).

A local leader whose members still train joins with kFlagJoinLeads: it takes its place in
the join order and counts as zeros in flat rounds at once, but hierarchical rounds (its
host's local sums, which it still pushes) wait for its push until its kFlagJoinRelease;
a release is answered at once, one after the join completed is ignored, one without a
leading join is refused."""

import numpy as np
import pytest

from native import load_core, load_server_testing

core = load_core()
ps_testing = load_server_testing()
T = core.MSG_TYPES
F32 = core.wire_dtype(np.dtype(np.float32))
I32 = core.wire_dtype(np.dtype(np.int32))
LEADS, RELEASE = core.FLAG_JOIN_LEADS, core.FLAG_JOIN_RELEASE


def push(store, sender, values, step, name="f", ranks=None):
    values = np.asarray(values, np.float32)
    fields = dict(type=T["PUSH_PULL"], key=core.key_of_name(name), partition=0, num_partitions=1,
                  step=step, dtype=F32, sender=sender, count=values.size,
                  total_count=values.size)
    params = []
    if ranks is not None:  # a local leader's push for its host's ranks
        fields["flags"] = core.FLAG_HIERARCHICAL
        params = [float(r) for r in ranks]
    return store.push(core.encode_head(fields, [values.size], params), values.tobytes())


def local_sum(store, sender, values, step, ranks):
    return push(store, sender, values, step, name="x#local sum", ranks=ranks)


def join_fields(sender, flags=0):
    return dict(type=T["JOIN"], key=core.key_of_name("tfps.join"), partition=0,
                num_partitions=1, step=1, dtype=I32, sender=sender, count=1, total_count=1,
                flags=flags)


def join(store, sender, flags=0):
    return store.push(core.encode_head(join_fields(sender, flags), [1]),
                      np.int32(sender).tobytes())


def sums(replies):
    return {rank: np.frombuffer(payload, np.float32) for rank, _, _, error, payload in replies
            if error is None}


def test_the_join_flags_on_the_wire():
    for flags in (LEADS, RELEASE):
        err, fields = core.decode_head(core.encode_head(join_fields(1, flags), [1]), 4)
        assert err is None and fields["flags"] == flags
    err, _ = core.decode_head(core.encode_head(join_fields(1, LEADS | RELEASE), [1]), 4)
    assert err is not None and "at most one" in err, err
    data = dict(type=T["PUSH_PULL"], key=1, partition=0, num_partitions=1, step=1, dtype=F32,
                sender=0, count=2, total_count=2)
    for flags in (LEADS, RELEASE):
        err, _ = core.decode_head(core.encode_head(dict(data, flags=flags), [2]), 8)
        assert err is not None and "only valid on a join" in err, err


def test_a_leading_join_counts_in_flat_rounds_and_pushes_local_sums_until_released():
    # Host A: leader 0 and member 1; host B: worker 2 alone (its pushes list itself).
    store = ps_testing.RoundsKeyStore(3)
    local_sum(store, 0, [1, 2], 1, [0, 1])
    np.testing.assert_array_equal(sums(local_sum(store, 2, [4, 4], 1, [2]))[0], [5, 6])
    assert join(store, 0, LEADS) == []           # the leader runs out of data first
    push(store, 1, [1, 1], 1)                    # a flat round: it counts as zeros at once
    np.testing.assert_array_equal(sums(push(store, 2, [2, 3], 1))[2], [3, 4])
    # Its members' local sum still comes from it: the round waits for its push.
    assert local_sum(store, 2, [1, 1], 2, [2]) == []
    replies = local_sum(store, 0, [10, 20], 2, [0, 1])
    assert sorted(sums(replies)) == [0, 2]
    np.testing.assert_array_equal(sums(replies)[0], [11, 21])
    assert join(store, 1) == []                  # the member joins: nothing more from A
    assert local_sum(store, 2, [7, 7], 3, [2]) == []
    released = join(store, 0, RELEASE)           # answered at once, and completes round 3
    assert sorted((r[0], r[3]) for r in released) == [(0, None), (2, None)]
    assert np.frombuffer([r for r in released if r[0] == 0][0][4], np.int32)[0] == 0
    np.testing.assert_array_equal(sums([r for r in released if r[0] == 2])[2], [7, 7])
    answers = join(store, 2)
    assert sorted(r[0] for r in answers) == [0, 1, 2]
    assert all(np.frombuffer(r[4], np.int32)[0] == 2 for r in answers)  # the last to join
    # Next epoch, same names: the leader was counted in one round of 'x#local sum' (3) and
    # one flat round; its own counts are kept in step with the others'.
    assert local_sum(store, 0, [1, 1], 3, [0, 1]) == []
    replies = local_sum(store, 2, [2, 2], 4, [2])
    assert {r[0]: r[2] for r in replies} == {0: 3, 2: 4}
    np.testing.assert_array_equal(sums(replies)[0], [3, 3])


def test_a_release_after_the_join_completed_is_ignored_and_one_without_a_lead_refused():
    store = ps_testing.RoundsKeyStore(2)
    [(rank, _, _, error, _)] = join(store, 1, RELEASE)
    assert rank == 1 and "did not make" in error, error
    assert join(store, 0, LEADS) == []
    assert len(join(store, 1)) == 2              # every worker joined: answered
    [(rank, kind, _, error, payload)] = join(store, 0, RELEASE)  # on its way meanwhile
    assert rank == 0 and error is None and np.frombuffer(payload, np.int32)[0] == 0
    [(rank, _, _, error, _)] = join(store, 0, RELEASE)           # but only once
    assert "did not make" in error, error

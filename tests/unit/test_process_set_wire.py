"""Protocol 5's process sets and join on the wire: a push with kFlagProcessSet carries its
set's member ranks after the params (strictly increasing, >= 0, 1..65536 of them), only on
summation pushes; kJoin carries int32[1] and nothing else. Hostile frames get an error,
never a crash or a wrong read."""

import struct

import numpy as np
import pytest

from native import load_core

core = load_core()
T = core.MSG_TYPES
F32 = core.wire_dtype(np.dtype(np.float32))
I32 = core.wire_dtype(np.dtype(np.int32))
SET = core.FLAG_PROCESS_SET


def push(**overrides):
    fields = dict(type=T["PUSH_PULL"], key=core.key_of_name("w"), partition=0, num_partitions=1,
                  step=1, dtype=F32, sender=2, count=10, total_count=10)
    fields.update(overrides)
    return fields


def test_protocol_5_and_the_new_names():
    assert core.PROTOCOL_VERSION == 5
    assert SET == 1 << 9
    assert T["JOIN"] == max(T.values())


@pytest.mark.parametrize("members", [[2], [0, 2], [0, 1, 2, 3], list(range(0, 3000, 3))])
def test_members_round_trip(members):
    frame = core.encode_head(push(flags=SET, members=members), [10])
    assert len(frame) == 64 + 8 + 4 + 4 * len(members)
    err, fields = core.decode_head(frame, 40)
    assert err is None and fields["members"] == members and fields["flags"] == SET


def test_members_with_a_broadcast_root():
    frame = core.encode_head(push(flags=SET | core.FLAG_BROADCAST, members=[1, 2]), [10], [1.0])
    err, fields = core.decode_head(frame, 40)
    assert err is None and fields["members"] == [1, 2] and fields["params"] == [1.0]


def test_a_push_without_the_flag_has_no_members():
    err, fields = core.decode_head(core.encode_head(push(), [10]), 40)
    assert err is None and fields["members"] == []


def with_members(raw_members, n=None):
    # The head of a process-set push with a hand-made member list.
    frame = core.encode_head(push(flags=SET, members=[0]), [10])[:-8]
    count = len(raw_members) if n is None else n
    return frame + struct.pack("<I", count) + struct.pack(f"<{len(raw_members)}i", *raw_members)


@pytest.mark.parametrize("frame,message", [
    (with_members([]), "member ranks"),                # none
    (with_members([0, 1], n=3), "member ranks"),       # says 3, carries 2
    (with_members([0, 1], n=1), "member ranks"),       # says 1, carries 2
    (with_members([0, 1], n=2**31), "member ranks"),   # absurd count
    (with_members([1, 0]), "strictly increasing"),
    (with_members([1, 1]), "strictly increasing"),
    (with_members([-1, 2]), ">= 0"),
])
def test_bad_member_lists_are_refused(frame, message):
    err, fields = core.decode_head(frame, 40)
    assert fields is None and message in err, err


def test_a_set_flag_without_its_list_is_refused():
    frame = core.encode_head(push(flags=SET, members=[0]), [10])[:-8]
    err, _ = core.decode_head(frame, 40)
    assert err is not None


@pytest.mark.parametrize("overrides", [
    dict(type=T["PUSH_PULL_REPLY"]),
    dict(flags=SET | 1 << 2, optimizer=1),  # PS apply
    dict(flags=SET | 1 << 15),              # hierarchical
    dict(type=T["PEER_DATA"]),
])
def test_the_set_flag_only_on_summation_pushes(overrides):
    fields = push(flags=SET, members=[0, 2])
    fields.update(overrides)
    err, _ = core.decode_head(core.encode_head(fields, [10]), 40)
    assert err is not None and ("process-set flag" in err or "hyperparameters" in err), err


def join(**overrides):
    fields = dict(type=T["JOIN"], key=core.key_of_name("tfps.join"), partition=0,
                  num_partitions=2, step=1, dtype=I32, sender=1, count=1, total_count=2)
    fields.update(overrides)
    return fields


def test_join_carries_one_int32():
    err, fields = core.decode_head(core.encode_head(join(), [2]), 4)
    assert err is None and fields["type"] == T["JOIN"]


@pytest.mark.parametrize("overrides,payload", [
    (dict(count=2, total_count=2), 8), (dict(dtype=F32), 4), (dict(flags=1 << 6), 4),
    (dict(reduce_op=1), 4), ({}, 0), ({}, 8)])
def test_anything_else_in_a_join_is_refused(overrides, payload):
    err, _ = core.decode_head(core.encode_head(join(**overrides), [2]), payload)
    assert err is not None

"""Protocol 5's kFlagAbortRound (issue 12): a worker that raised before a collective's op
uses up its call with a uint8 push carrying the reason, whole, to every partition of the
name (a local leader's lists the ranks of its host, kFlagHierarchical). The flag is valid
there (and echoed on errors and acks), refused anywhere else."""

import numpy as np
import pytest

from native import load_core

core = load_core()
T = core.MSG_TYPES
U8 = core.wire_dtype(np.dtype(np.uint8))
WHY = b"ValueError: root_rank=7 is not a rank in 0..1"


def abort_push(**overrides):
    fields = dict(type=T["PUSH_PULL"], key=core.key_of_name("broadcast.eager"), partition=0,
                  num_partitions=1, step=3, dtype=U8, sender=1, count=len(WHY),
                  total_count=len(WHY), flags=core.FLAG_ABORT_ROUND)
    fields.update(overrides)
    return fields


def decode(fields, dims=(len(WHY),), params=(), payload=len(WHY)):
    return core.decode_head(core.encode_head(fields, list(dims), list(params)), payload)


def test_abort_round_is_bit_11():
    assert core.FLAG_ABORT_ROUND == 1 << 11


def test_abort_push_carries_its_reason():
    err, decoded = decode(abort_push())
    assert err is None and decoded["flags"] == core.FLAG_ABORT_ROUND
    # The engine may add acknowledgement and timing flags to any push.
    err, _ = decode(abort_push(flags=core.FLAG_ABORT_ROUND | core.FLAG_ACK | core.FLAG_TIMED))
    assert err is None, err


def test_abort_goes_whole_to_every_partition():
    # Each partition of the name (each on its server) gets the whole reason.
    err, decoded = decode(abort_push(partition=2, num_partitions=3))
    assert err is None and decoded["num_partitions"] == 3, err


def test_a_local_leaders_abort_lists_its_hosts_ranks():
    # A local step failed under hierarchical aggregation: the leader stands for its host.
    err, decoded = decode(abort_push(flags=core.FLAG_ABORT_ROUND | core.FLAG_HIERARCHICAL,
                                     sender=0), params=(0.0, 1.0, 2.0))
    assert err is None, err


@pytest.mark.parametrize("overrides, extra", [
    (dict(dtype=core.wire_dtype(np.dtype(np.float32))), dict(payload=4 * len(WHY))),
    (dict(num_partitions=2, total_count=2 * len(WHY)), {}),  # the text is whole in each
    (dict(flags=core.FLAG_ABORT_ROUND | core.FLAG_HIERARCHICAL), {}),  # lists no ranks
    ({}, dict(params=(1.0,))),  # ranks without the hierarchical flag
    (dict(reduce_op=2), {}),
    (dict(flags=core.FLAG_ABORT_ROUND | core.FLAG_BROADCAST), dict(params=(0.0,))),
    (dict(flags=core.FLAG_ABORT_ROUND | core.FLAG_NO_DATA), dict(payload=0)),
    (dict(type=T["PEER_DATA"]), {}),
    (dict(type=T["PUSH_PULL_REPLY"]), {}),
    ({}, dict(dims=(1, len(WHY)))),
])
def test_abort_round_anywhere_else_is_refused(overrides, extra):
    err, _ = decode(abort_push(**overrides), **extra)
    assert err is not None and ("abort" in err or "flag" in err or "op" in err), err

"""Protocol 5's kFlagAbortRound (issue 12): a worker that raised before a collective's op
uses up its call with a one-partition uint8 push carrying the reason. The flag is valid
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


@pytest.mark.parametrize("overrides, extra", [
    (dict(dtype=core.wire_dtype(np.dtype(np.float32))), dict(payload=4 * len(WHY))),
    (dict(num_partitions=2), {}),
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

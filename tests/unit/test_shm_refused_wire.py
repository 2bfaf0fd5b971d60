"""kFlagShmRefused (bit 14, protocol 5): a server's error reply to a kPushPullShm whose
segment it refused (unsealed, unreachable, wrong size; nothing counted), so that the worker
sends that partition over the socket. Valid on an error reply only."""

import numpy as np
import pytest

from native import load_core

core = load_core()
T = core.MSG_TYPES
F32 = core.wire_dtype(np.dtype(np.float32))


def test_shm_refused_is_bit_14():
    assert core.FLAG_SHM_REFUSED == 1 << 14


def test_an_error_reply_may_carry_it():
    fields = dict(type=T["ERROR"], key=core.key_of_name("g"), partition=3, num_partitions=4,
                  step=2, sender=0, status=9, flags=core.FLAG_SHM_REFUSED)
    why = b"server 0 refused the shared memory of worker 1 (partition 3): ..."
    err, decoded = core.decode_head(core.encode_head(fields), len(why))
    assert err is None, err
    assert decoded["flags"] == core.FLAG_SHM_REFUSED and decoded["partition"] == 3


@pytest.mark.parametrize("kind", ["PUSH_PULL", "PUSH_PULL_SHM", "PUSH_PULL_REPLY",
                                  "PUSH_PULL_REPLY_SHM", "ACK"])
def test_anything_else_carrying_it_is_refused(kind):
    shm = kind.endswith("_SHM")
    fields = dict(type=T[kind], key=core.key_of_name("g"), partition=0, num_partitions=1,
                  step=1, dtype=F32, sender=1, count=4, total_count=4,
                  flags=core.FLAG_SHM_REFUSED)
    dims = [4] if kind.startswith("PUSH_PULL") and "REPLY" not in kind else []
    payload = 0 if shm or kind == "ACK" else 16
    err, _ = core.decode_head(core.encode_head(fields, dims), payload)
    assert err is not None and "shared-memory-refused flag" in err, err

"""Sparse messages (kFlagSparse): [row ids][rows] payloads validated against the shape."""

import numpy as np
import pytest

from native import load_core

core = load_core()
T = core.MSG_TYPES
ADAGRAD = 5  # Optimizer::kAdagrad: lr, epsilon, update_slots, then the accum's initial value
PARAMS = [0.1, 0.0, 1.0, 0.1]
ROW = 16 * 4 + 8  # one float32 row of 16 with its int64 id


def sparse_push(rows, **overrides):
    fields = dict(type=T["PUSH_PULL"], key=core.key_of_name("emb"), partition=0,
                  num_partitions=2, step=1, dtype=core.wire_dtype(np.dtype(np.float32)),
                  flags=core.FLAG_PS_APPLY | core.FLAG_SPARSE, optimizer=ADAGRAD, sender=0,
                  count=rows, total_count=1000 * 16)
    fields.update(overrides)
    return fields


def test_sparse_push_round_trip():
    frame = core.encode_head(sparse_push(3), [1000, 16], PARAMS)
    err, decoded = core.decode_head(frame, 3 * ROW)
    assert err is None, err
    assert decoded["count"] == 3 and decoded["flags"] & core.FLAG_SPARSE
    assert decoded["dims"] == [1000, 16]


def test_a_push_with_no_rows_is_valid():
    frame = core.encode_head(sparse_push(0), [1000, 16], PARAMS)
    assert core.decode_head(frame, 0)[0] is None


def test_sparse_reply_carries_the_shape():
    fields = sparse_push(2, type=T["PUSH_PULL_REPLY"], flags=core.FLAG_SPARSE, optimizer=0)
    assert core.decode_head(core.encode_head(fields, [1000, 16]), 2 * ROW)[0] is None
    assert "shape" in core.decode_head(core.encode_head(fields), 2 * ROW)[0]


@pytest.mark.parametrize("overrides, dims, payload, message", [
    ({}, [1000, 16], 3 * ROW - 1, "payload has"),
    ({}, [1000, 16], 3 * 16 * 4, "payload has"),  # rows without their ids
    (dict(count=1001), [1000, 16], 1001 * ROW, "do not fit"),
    ({}, [999, 16], 3 * ROW, "does not hold"),
    (dict(count=0, total_count=0), [1000, 0], 0, "do not fit"),  # rows of no elements
    (dict(flags=core.FLAG_SPARSE, optimizer=0), [1000, 16], 3 * ROW, "PS apply"),
    (dict(flags=core.FLAG_SPARSE | core.FLAG_PS_INIT, optimizer=0), [1000, 16], 3 * ROW, "init"),
    (dict(flags=core.FLAG_SPARSE | core.FLAG_PS_APPLY | core.FLAG_NO_DATA), [1000, 16], 0,
     "no data"),
    (dict(type=T["HELLO"]), [1000, 16], 3 * ROW, "sparse"),
])
def test_bad_sparse_messages_are_rejected(overrides, dims, payload, message):
    params = PARAMS if overrides.get("optimizer", ADAGRAD) else []
    err, decoded = core.decode_head(core.encode_head(sparse_push(3, **overrides), dims, params),
                                    payload)
    assert decoded is None
    assert message in err, err


def test_a_sparse_push_without_shape_is_rejected():
    err, _ = core.decode_head(core.encode_head(sparse_push(0, total_count=0), [], PARAMS), 0)
    assert "shape" in err


def test_ps_partitions_are_row_aligned():
    # 1000 x 16 float32 rows in partitions of at most 1000 bytes: 15 rows (960 bytes) each.
    parts = core.partition_tensor(7, 16000, 4, 1000, 2, row_elems=16)
    assert all(count % 16 == 0 and offset % 16 == 0 for _, offset, count, _ in parts)
    assert parts[0][2] == 15 * 16 and sum(p[2] for p in parts) == 16000
    # A row larger than a partition: element-sized cut, as before.
    assert core.partition_tensor(7, 16000, 4, 32, 2, row_elems=16)[0][2] == 8
    # Without rows nothing changes.
    assert core.partition_tensor(7, 16000, 4, 1000, 2)[0][2] == 250

"""Protocol 4's collective fields: the uint16/int16/bool dtypes, the reduce op byte
(Header::reduce_op) and the broadcast root (kFlagBroadcast), on the wire and in the
server's reduction (ReduceInto) against NumPy."""

import numpy as np
import pytest

from native import load_core, load_server_testing

core = load_core()
ps_testing = load_server_testing()
T = core.MSG_TYPES
F32 = core.wire_dtype(np.dtype(np.float32))
SUM, MIN, MAX, PRODUCT = 0, 1, 2, 3


def push(**overrides):
    fields = dict(type=T["PUSH_PULL"], key=core.key_of_name("w"), partition=0, num_partitions=1,
                  step=1, dtype=F32, sender=0, count=10, total_count=10)
    fields.update(overrides)
    return fields


def decode(fields, payload_bytes=40, params=()):
    return core.decode_head(core.encode_head(fields, [10], list(params)), payload_bytes)


def test_new_dtypes_have_their_wire_codes():
    assert core.wire_dtype(np.dtype(np.uint16)) == 9
    assert core.wire_dtype(np.dtype(np.int16)) == 10
    assert core.wire_dtype(np.dtype(np.bool_)) == 11
    err, fields = decode(push(dtype=11), payload_bytes=10)  # one byte per bool
    assert err is None and fields["dtype"] == 11
    err, _ = decode(push(dtype=10), payload_bytes=10)
    assert err is not None and "20" in err  # int16: 2 bytes each


@pytest.mark.parametrize("op", [SUM, MIN, MAX, PRODUCT])
def test_reduce_op_travels_on_pushes_and_replies(op):
    for kind in ("PUSH_PULL", "PUSH_PULL_REPLY"):
        err, fields = decode(push(type=T[kind], reduce_op=op))
        assert err is None and fields["reduce_op"] == op


@pytest.mark.parametrize("overrides, message", [
    (dict(reduce_op=4), "unknown reduce op 4"),
    (dict(reduce_op=MAX, flags=core.FLAG_NO_DATA), "not a plain summation"),
    (dict(reduce_op=MIN, flags=core.FLAG_PS_INIT), "not a plain summation"),
    (dict(reduce_op=PRODUCT, type=T["PEER_DATA"]), "not a plain summation"),
])
def test_reduce_op_where_it_does_not_apply_is_refused(overrides, message):
    err, _ = decode(push(**overrides))
    assert err is not None and message in err, err


def test_reduce_op_with_a_codec_is_refused():
    size = core.encoded_bytes(core.CODECS["int8"], 10)
    err, _ = decode(push(reduce_op=MAX, codec=core.CODECS["int8"]), payload_bytes=size)
    assert err is not None and "not a plain summation" in err, err


def test_broadcast_carries_its_root():
    err, fields = decode(push(flags=core.FLAG_BROADCAST), params=[1])
    assert err is None and fields["params"] == [1.0]
    err, _ = decode(push(flags=core.FLAG_BROADCAST | core.FLAG_NO_DATA), payload_bytes=0,
                    params=[0])
    assert err is None, err


@pytest.mark.parametrize("flags, params, message", [
    (0, [], "root rank as its one parameter"),
    (0, [0, 1], "root rank as its one parameter"),
    (0, [-1], "is not a rank"),
    (0, [0.5], "is not a rank"),
    (0, [float("nan")], "is not a rank"),
    (core.FLAG_PS_INIT, [0], "InvalidArgument"),  # refused by one rule or another
])
def test_bad_broadcast_roots_are_refused(flags, params, message):
    err, _ = decode(push(flags=core.FLAG_BROADCAST | flags), params=params)
    assert err is not None and message in err, err


DTYPES = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int16, np.uint16,
          np.int32, np.int64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op, oracle", [(SUM, np.add), (MIN, np.minimum), (MAX, np.maximum),
                                        (PRODUCT, np.multiply)])
def test_reduce_into_matches_numpy(dtype, op, oracle):
    rng = np.random.default_rng(op * 10 + DTYPES.index(dtype))
    scale = 50 if np.dtype(dtype).kind in "fi" else 100
    a = (rng.standard_normal(1003) * scale).astype(dtype)
    b = (rng.standard_normal(1003) * scale).astype(dtype)
    if np.dtype(dtype).kind == "f":
        a[:3], b[:3] = np.nan, [1, np.nan, -np.inf]  # NaN wins min and max, as in NumPy
    with np.errstate(all="ignore"):
        if dtype == np.float16:  # computed in float32, rounded once
            expected = oracle(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
        else:
            expected = oracle(a, b)  # integers wrap around, as NumPy's do
    ps_testing.reduce_into(a, b, op)
    np.testing.assert_array_equal(a, expected)


@pytest.mark.parametrize("op, oracle", [(SUM, np.logical_or), (MAX, np.logical_or),
                                        (MIN, np.logical_and), (PRODUCT, np.logical_and)])
def test_bool_reductions_are_logical(op, oracle):
    a = np.array([0, 0, 1, 1], np.bool_)
    b = np.array([0, 1, 0, 1], np.bool_)
    expected = oracle(a, b)
    ps_testing.reduce_into(a, b, op)
    np.testing.assert_array_equal(a, expected)
    assert set(a.view(np.uint8).tolist()) <= {0, 1}


def test_int16_and_uint16_sums_wrap():
    a = np.array([32767, -32768], np.int16)
    ps_testing.sum_into(a, np.array([1, -1], np.int16))
    np.testing.assert_array_equal(a, [-32768, 32767])
    u = np.array([65535, 7], np.uint16)
    ps_testing.sum_into(u, np.array([2, 3], np.uint16))
    np.testing.assert_array_equal(u, [1, 10])


def test_abort_travels_as_peer_text():
    why = b"alltoall of 'x': the splits add up to 9 rows"
    fields = dict(type=T["PEER_DATA"], key=1, partition=0, num_partitions=1, step=1,
                  dtype=core.wire_dtype(np.dtype(np.uint8)), sender=1, count=len(why),
                  total_count=len(why), flags=core.FLAG_ABORT)
    err, decoded = core.decode_head(core.encode_head(fields, [len(why)], []), len(why))
    assert err is None and decoded["flags"] == core.FLAG_ABORT


@pytest.mark.parametrize("overrides", [dict(type=T["PUSH_PULL"]), dict(dtype=F32),
                                       dict(flags=core.FLAG_ABORT | core.FLAG_NO_DATA)])
def test_abort_anywhere_else_is_refused(overrides):
    fields = dict(type=T["PEER_DATA"], key=1, partition=0, num_partitions=1, step=1,
                  dtype=core.wire_dtype(np.dtype(np.uint8)), sender=1, count=4, total_count=4,
                  flags=core.FLAG_ABORT)
    fields.update(overrides)
    payload = 16 if fields["dtype"] == F32 else 4
    err, _ = core.decode_head(core.encode_head(fields, [4], []), payload)
    assert err is not None, fields

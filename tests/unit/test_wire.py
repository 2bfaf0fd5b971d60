"""The wire protocol: encode/decode round trip and rejection of every kind of bad header."""

import numpy as np
import pytest

from native import load_core

core = load_core()
T = core.MSG_TYPES


def push_fields(**overrides):
    fields = dict(type=T["PUSH_PULL"], key=core.key_of_name("w"), partition=1, num_partitions=3,
                  step=7, dtype=core.wire_dtype(np.dtype(np.float32)), flags=0, sender=2,
                  count=6, total_count=18)
    fields.update(overrides)
    return fields


def test_header_is_64_bytes():
    assert core.HEADER_BYTES == 64
    assert len(core.encode_head({"type": T["HELLO"]})) == 64


def test_round_trip_keeps_every_field():
    fields = push_fields()
    frame = core.encode_head(fields, [3, 6])
    assert len(frame) == 64 + 2 * 8
    err, decoded = core.decode_head(frame, 6 * 4)
    assert err is None
    for name, value in fields.items():
        assert decoded[name] == value, name
    assert decoded["dims"] == [3, 6]
    assert decoded["magic"] == core.MAGIC and decoded["version"] == core.PROTOCOL_VERSION


def test_no_data_push_has_an_empty_payload():
    frame = core.encode_head(push_fields(flags=core.FLAG_NO_DATA), [18])
    assert core.decode_head(frame, 0)[0] is None
    assert "payload" in core.decode_head(frame, 24)[0]


@pytest.mark.parametrize("overrides, dims, payload, message", [
    (dict(magic=0x12345678), [18], 24, "magic"),
    (dict(version=99), [18], 24, "version mismatch"),
    (dict(type=0), [18], 24, "message type"),
    (dict(type=200), [18], 24, "message type"),
    (dict(flags=1 << 20), [18], 24, "flags"),
    (dict(dtype=0), [18], 24, "dtype"),
    (dict(dtype=77), [18], 24, "dtype"),
    (dict(partition=3), [18], 24, "out of range"),
    (dict(num_partitions=0, partition=0), [18], 24, "out of range"),
    (dict(count=19), [18], 76, "count"),
    (dict(count=1 << 62, total_count=1 << 62), [1 << 62], 0, "out of range"),
    ({}, [18], 23, "payload has 23 bytes"),
    ({}, [4, 4], 24, "does not hold 18 elements"),
    ({}, [-18, -1], 24, "dimension"),
])
def test_bad_headers_are_rejected(overrides, dims, payload, message):
    err, decoded = core.decode_head(core.encode_head(push_fields(**overrides), dims), payload)
    assert decoded is None
    assert message in err


def test_unknown_flags_are_named_in_hex():
    # The flags are a bit set: the message shows them as hexadecimal, not decimal after "0x".
    err, _ = core.decode_head(core.encode_head(push_fields(flags=1 << 20), [18]), 24)
    assert "unknown flags 0x100000" in err, err
    err, _ = core.decode_head(core.encode_head(push_fields(flags=0xABC00000), [18]), 24)
    assert "unknown flags 0xabc00000" in err, err


def test_message_types_come_from_one_list():
    # MSG_TYPES is generated from wire/message.h's TFPS_MSG_TYPES, as is the bound that
    # DecodeHead checks: every listed type decodes, the next number does not.
    assert sorted(T.values()) == list(range(1, core.MAX_MSG_TYPE + 1))
    assert T["PUSH_PULL"] == 5 and T["PONG"] == core.MAX_MSG_TYPE
    for value in T.values():
        err, _ = core.decode_head(core.encode_head(dict(type=value)), 0)
        assert err is None or "unknown message type" not in err, (value, err)
    err, _ = core.decode_head(core.encode_head(dict(type=core.MAX_MSG_TYPE + 1)), 0)
    assert "unknown message type %d" % (core.MAX_MSG_TYPE + 1) in err


def test_truncated_and_padded_frames_are_rejected():
    frame = core.encode_head(push_fields(), [18])
    assert "shorter" in core.decode_head(frame[:40], 24)[0]
    assert "dims" in core.decode_head(frame + b"\0" * 3, 24)[0]
    assert "dims" in core.decode_head(frame[:-8], 24)[0]


def test_random_garbage_never_decodes():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        size = int(rng.integers(0, 200))
        err, decoded = core.decode_head(rng.bytes(size), int(rng.integers(0, 100)))
        assert decoded is None and err


def test_error_replies_carry_text_payloads():
    frame = core.encode_head(dict(type=T["ERROR"], status=3, key=5, sender=0))
    err, decoded = core.decode_head(frame, 100)
    assert err is None and decoded["status"] == 3


def test_key_of_name_is_stable_fnv1a():
    # FNV-1a 64 of "a": the key must never change between releases or hosts.
    assert core.key_of_name("a") == 0xAF63DC4C8601EC8C
    assert core.key_of_name("grad.dense/kernel") != core.key_of_name("grad.dense/bias")


def batch_head(**overrides):
    return core.encode_head(dict(dict(type=T["BATCH"], sender=1, count=3), **overrides))


def test_batch_heads_count_their_messages_and_carry_nothing_else():
    assert core.check_batch(batch_head(), 6) is None
    assert core.check_batch(batch_head(count=core.MAX_BATCH), 2 * core.MAX_BATCH) is None
    assert "needs 6 frames after its head, got 5" in core.check_batch(batch_head(), 5)
    assert "needs 6 frames" in core.check_batch(batch_head(), 7)
    for bad in (dict(count=0), dict(count=core.MAX_BATCH + 1), dict(flags=core.FLAG_NO_DATA)):
        assert "a batch head must count" in core.check_batch(batch_head(**bad), 6)
    with_dims = core.encode_head(dict(type=T["BATCH"], sender=1, count=1), [4])
    assert "a batch head must count" in core.check_batch(with_dims, 2)
    assert "not a batch head" in core.check_batch(core.encode_head(dict(type=T["HELLO"])), 2)
    assert "a batch head must count" in core.decode_head(batch_head(), 8)[0]  # no payload


def test_timed_replies_carry_two_stamps():
    reply = dict(push_fields(type=T["PUSH_PULL_REPLY"], flags=core.FLAG_TIMED))
    err, decoded = core.decode_head(core.encode_head(reply, [], [1.5e15, 1.6e15]), 24)
    assert err is None and decoded["flags"] == core.FLAG_TIMED
    assert "2 timestamps" in core.decode_head(core.encode_head(reply, [], [1.0]), 24)[0]
    # A timed push carries its usual fields; only pushes and replies can be timed.
    assert core.decode_head(core.encode_head(push_fields(flags=core.FLAG_TIMED), [18]), 24)[0] is None
    hello = core.encode_head(dict(type=T["HELLO"], sender=0, flags=core.FLAG_TIMED))
    assert "only pushes" in core.decode_head(hello, 0)[0]


def test_only_pushes_ask_for_acknowledgements():
    assert core.decode_head(core.encode_head(push_fields(flags=core.FLAG_ACK), [18]), 24)[0] is None
    reply = push_fields(type=T["PUSH_PULL_REPLY"], flags=core.FLAG_ACK)
    assert "acknowledgement" in core.decode_head(core.encode_head(reply), 24)[0]
    ack = dict(type=T["ACK"], key=5, partition=1, num_partitions=3, step=2, sender=0)
    err, decoded = core.decode_head(core.encode_head(ack), 0)
    assert err is None and decoded["partition"] == 1


def test_hierarchical_push_lists_ranks_and_is_only_a_dense_summation_push():
    ok = core.encode_head(push_fields(flags=core.FLAG_HIERARCHICAL), [18], [2.0, 3.0])
    err, decoded = core.decode_head(ok, 24)
    assert err is None and decoded["flags"] == core.FLAG_HIERARCHICAL
    for fields, params in [(push_fields(flags=core.FLAG_HIERARCHICAL), []),
                           (push_fields(flags=core.FLAG_HIERARCHICAL | core.FLAG_NO_DATA), [2.0]),
                           (push_fields(flags=core.FLAG_HIERARCHICAL, type=T["PUSH_PULL_REPLY"]),
                            [2.0])]:
        payload = 0 if fields["flags"] & core.FLAG_NO_DATA else 24
        err, decoded = core.decode_head(core.encode_head(fields, [18], params), payload)
        assert decoded is None and "hierarchical" in err, err


def test_shared_memory_push_is_checked_as_the_push_it_stands_for():
    fields = push_fields(type=T["PUSH_PULL_SHM"])
    err, decoded = core.decode_head(core.encode_head(fields, [18]), 0)
    assert err is None and decoded["type"] == T["PUSH_PULL_SHM"]
    assert "no payload frame" in core.decode_head(core.encode_head(fields, [18]), 24)[0]
    err, _ = core.decode_head(core.encode_head(dict(fields, count=99), [18]), 0)
    assert "out of range" in err  # 99 of 18 elements, as a kPushPull would be refused
    err, _ = core.decode_head(core.encode_head(push_fields(type=T["PUSH_PULL_REPLY_SHM"],
                                                           flags=core.FLAG_SPARSE), [18]), 0)
    assert "dense" in err

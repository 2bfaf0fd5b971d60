"""Compressed messages on the wire (protocol 3; 4: PS-mode gradients too): the codec byte travels, the payload size
is checked against the codec's encoded size, and a codec where compression does not apply
is refused before anything reads the payload."""

import numpy as np
import pytest

from native import load_core

core = load_core()
T = core.MSG_TYPES
C = core.CODECS
F32 = core.wire_dtype(np.dtype(np.float32))


def push(**overrides):
    fields = dict(type=T["PUSH_PULL"], key=core.key_of_name("w"), partition=0, num_partitions=1,
                  step=1, dtype=F32, sender=0, count=3000, total_count=3000, codec=C["int8"])
    fields.update(overrides)
    return fields


def decode(fields, payload, dims=(3000,)):
    return core.decode_head(core.encode_head(fields, list(dims)), payload)


def test_protocol_version_is_5():
    assert core.PROTOCOL_VERSION == 5
    assert core.HEADER_BYTES == 64


@pytest.mark.parametrize("name", ["none", "fp16", "bf16", "int8", "onebit", "topk", "randomk"])
def test_codec_round_trips_with_its_encoded_size(name):
    size = core.encoded_bytes(C[name], 3000, 30)
    err, fields = decode(push(codec=C[name]), size)
    assert err is None and fields["codec"] == C[name]
    if name != "none":
        assert "payload of" in decode(push(codec=C[name]), size + 1)[0]


def test_reply_carries_the_codec_and_no_shape():
    size = core.encoded_bytes(C["onebit"], 3000)
    err, fields = decode(push(type=T["PUSH_PULL_REPLY"], codec=C["onebit"]), size, dims=())
    assert err is None and fields["codec"] == C["onebit"]


@pytest.mark.parametrize("overrides, message", [
    (dict(codec=7), "unknown codec"),
    (dict(dtype=core.wire_dtype(np.dtype(np.float64))), "not a dense float32"),
    (dict(flags=core.FLAG_NO_DATA), "not a dense float32"),
    (dict(type=T["PEER_DATA"]), "not a dense float32"),
    (dict(reduce_op=1), "reduce op"),
    (dict(codec=0, flags=core.FLAG_NO_FEEDBACK), "no-feedback"),
])
def test_codec_where_it_does_not_apply_is_refused(overrides, message):
    err, _ = decode(push(**overrides), core.encoded_bytes(C["int8"], 3000))
    assert err is not None and message in err, err


def test_ps_init_and_sparse_pushes_cannot_be_compressed():
    size = core.encoded_bytes(C["int8"], 3000)
    err, _ = decode(push(flags=core.FLAG_PS_INIT), size)
    assert err is not None and "not a dense float32" in err, err
    sparse = push(flags=core.FLAG_PS_APPLY | core.FLAG_SPARSE, optimizer=1)
    err, _ = core.decode_head(core.encode_head(sparse, [3000], [0.1]), size)
    assert err is not None and "not a dense float32" in err, err


def test_a_ps_gradient_push_may_be_compressed():
    fields = push(flags=core.FLAG_PS_APPLY, codec=C["onebit"], optimizer=1)
    err, fields = core.decode_head(core.encode_head(fields, [3000], [0.1]),
                                   core.encoded_bytes(C["onebit"], 3000))
    assert err is None and fields["codec"] == C["onebit"], err


def test_no_feedback_flag_rides_on_a_compressed_push():
    err, fields = decode(push(codec=C["onebit"], flags=core.FLAG_NO_FEEDBACK),
                         core.encoded_bytes(C["onebit"], 3000))
    assert err is None and fields["flags"] == core.FLAG_NO_FEEDBACK

"""The Python face of compression (tf_ps_ops/collectives/compression.py): the names the op gets, the
casts around it, and the names the core accepts (the same grammar as TFPS_COMPRESSION)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from native import load_core

tf = pytest.importorskip("tensorflow")
from tf_ps_ops.compression import Compression, Compressor, wire_codec  # noqa: E402

core = load_core()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_each_builtin_names_a_core_codec():
    C = Compression
    assert wire_codec(C.none) == ("", -1)  # the job default
    assert wire_codec(C.uncompressed) == ("none", -1)
    for compressor, wire in [(C.fp16, "fp16"), (C.bf16, "bf16"), (C.int8, "int8"),
                             (C.onebit, "onebit"), (C.topk, "topk:0.01"),
                             (C.topk(0.25), "topk:0.25"), (C.randomk(1e-3), "randomk:0.001")]:
        assert wire_codec(compressor) == (wire, -1)
        core.parse_codec(wire)  # the core takes what Python sends


def test_error_feedback_switch():
    assert wire_codec(Compression.onebit.with_error_feedback(False)) == ("onebit", 0)
    assert wire_codec(Compression.topk(0.1).with_error_feedback(False)) == ("topk:0.1", 0)
    assert wire_codec(Compression.topk.with_error_feedback(True)(0.2)) == ("topk:0.2", 1)


def test_a_users_own_compressor_gets_the_job_default():
    class Mine(Compressor):
        @staticmethod
        def compress(tensor):
            return tensor, None

    assert wire_codec(Mine) == ("", -1)


@pytest.mark.parametrize("text", ["int4", "topk", "topk:0", "topk:2", "randomk:x", "int8:1"])
def test_bad_names_are_refused_in_python_as_in_the_core(text):
    with pytest.raises(ValueError):
        Compression.parse(text)
    with pytest.raises(ValueError):
        core.parse_codec(text)


def test_compress_brings_floats_to_float32_and_back():
    half = tf.constant([1.5, -2.0], tf.float16)
    sent, ctx = Compression.int8.compress(half)
    assert sent.dtype == tf.float32 and ctx == tf.float16
    assert Compression.int8.decompress(sent, ctx).dtype == tf.float16
    ints = tf.constant([1, 2], tf.int32)
    sent, ctx = Compression.int8.compress(ints)
    assert sent is ints and ctx is None
    f32 = tf.constant(np.ones(3, np.float32))
    assert Compression.onebit.compress(f32)[0] is f32



@pytest.mark.parametrize("value, message", [
    ("int4", "TFPS_COMPRESSION: compression 'int4' is not one of"),
    ("topk:7", "the ratio must be in [1/65536, 1]")])
def test_a_bad_job_default_fails_init_before_the_rendezvous(value, message):
    # In a child: the engine is a process-wide singleton. Port 9 (discard) has no
    # scheduler; a good value would wait there for TFPS_TIMEOUT instead of failing at once.
    code = ("import sys; sys.path.insert(0, 'tests'); from native import load_core; "
            "load_core().init('127.0.0.1', 9, 0, 1, 1)")
    env = {**os.environ, "TFPS_COMPRESSION": value, "TFPS_TIMEOUT": "5"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, env=env, cwd=ROOT)
    assert result.returncode != 0 and message in result.stderr, result.stderr

"""The server's half of compression, one KeyStore driven push by push (no network): a
compressed push is decoded, summed in float32 and re-encoded with the server's own error
feedback (or without, when the push says so), as tests/codec_reference.py models it."""

import numpy as np
import pytest

import codec_reference as ref
from native import load_core, load_server_testing

core = load_core()
ps_testing = load_server_testing()
N = 2500


@pytest.mark.parametrize("codec, ratio", [("fp16", 1), ("int8", 1), ("onebit", 1),
                                          ("topk", 0.1), ("randomk", 0.1)])
@pytest.mark.parametrize("feedback", [True, False])
def test_one_worker_rounds_match_the_model(codec, ratio, feedback):
    store, server = ps_testing.KeyStore(), ref.ErrorFeedbackModel()
    key, k = 99, ref.sparse_k(ratio, N) if codec in ("topk", "randomk") else 0
    rng = np.random.default_rng(5)
    for step in range(1, 6):
        x = rng.standard_normal(N).astype(np.float32)
        seed = ref.randomk_seed(key, 0, step)
        pushed = ref.encode(codec, x, k, seed)
        reply = store.push_encoded(key, 0, pushed.tobytes(), N, core.CODECS[codec],
                                   no_feedback=not feedback)
        total = ref.decode(codec, pushed, N, k, seed)
        want = server.encode(0, codec, total, k, seed) if feedback else \
            ref.encode(codec, total, k, seed)
        assert len(reply) == want.size
        np.testing.assert_allclose(ref.decode(codec, np.frombuffer(reply, np.uint8), N, k, seed),
                                   ref.decode(codec, want, N, k, seed), rtol=1e-5, atol=1e-5)


def test_a_bad_payload_is_refused_before_it_is_read():
    store = ps_testing.KeyStore()
    with pytest.raises(RuntimeError, match="payload of 7 bytes"):
        store.push_encoded(1, 0, b"\0" * 7, N, core.CODECS["int8"])
    with pytest.raises(RuntimeError, match="does not fit"):  # 1 kept of 2^20: too few
        store.push_encoded(1, 0, b"\0" * 8, 1 << 20, core.CODECS["topk"])

"""The server's sum of compressed pushes from several workers (one KeyStore driven push
by push, no network): the first push is decoded, later onebit/int8 pushes are decoded
straight into the sum (DecodeAdd), and the sum is re-encoded with the server's error
feedback or without. Checked to the bit against NumPy: float32 adds in arrival order,
the encoder as codec_reference.onebit_encode_exact models it (int8: ref.encode)."""

import numpy as np
import pytest

import codec_reference as ref
from native import load_core, load_server_testing

core = load_core()
ps_testing = load_server_testing()
CHUNK = core.CODEC_CHUNK
N = 3 * CHUNK + 29  # full chunks and a partial one


def encode_exact(codec, x):
    return ref.onebit_encode_exact(x) if codec == "onebit" else ref.encode(codec, x)


def gradient(rng, step, rank):
    g = (rng.standard_normal(N) * np.float32(10.0) ** (rank - 1)).astype(np.float32)
    g[::53] = -0.0
    if step == 2 and rank == 1:
        g[CHUNK + 7] = np.nan  # this chunk of the sum is NaN throughout
    return g


@pytest.mark.parametrize("codec", ["onebit", "int8"])
@pytest.mark.parametrize("feedback", [True, False])
def test_three_workers_sum_to_the_bit(codec, feedback):
    store = ps_testing.StaleKeyStore(3, "bsp")
    rng = np.random.default_rng(7)
    memory = np.zeros(N, np.float32)
    orders = [(0, 1, 2), (2, 0, 1), (1, 2, 0)]
    for step in range(1, 4):
        pushes = {rank: encode_exact(codec, gradient(rng, step, rank)) for rank in range(3)}
        total, replies = None, []
        for rank in orders[step - 1]:
            decoded = ref.decode(codec, pushes[rank], N)
            with np.errstate(invalid="ignore"):
                total = decoded if total is None else (total + decoded).astype(np.float32)
            replies += store.push_encoded(rank, 5, 1, step, pushes[rank].tobytes(), N,
                                          core.CODECS[codec], no_feedback=not feedback)
        with np.errstate(invalid="ignore", over="ignore"):
            if feedback and codec == "onebit":
                p = (memory + total).astype(np.float32)
                want = encode_exact(codec, p)
                r = (p - ref.decode(codec, want, N)).astype(np.float32)
                memory = np.where(np.isfinite(r), r, np.float32(0)).astype(np.float32)
            else:  # int8 keeps no memory (CodecWantsErrorFeedback)
                want = encode_exact(codec, total)
        assert sorted(r[0] for r in replies) == [0, 1, 2]
        for rank, got_step, payload in replies:
            assert got_step == step
            np.testing.assert_array_equal(np.frombuffer(payload, np.uint8), want,
                                          err_msg=f"{codec} step {step} rank {rank}")


def test_a_compressed_push_of_another_reduce_op_is_refused_before_the_round():
    # Only sums are compressed, so adding straight into the sum is always right (the
    # server checks the op again before it does).
    store = ps_testing.StaleKeyStore(2, "bsp")
    push = ref.onebit_encode_exact(np.ones(N, np.float32))
    with pytest.raises(RuntimeError, match="reduce op max on a message that is not"):
        store.push_encoded(0, 6, 0, 1, push.tobytes(), N, core.CODECS["onebit"], reduce_op=2)


def test_a_later_push_of_the_wrong_size_fails_the_round_and_leaves_the_sum_alone():
    store = ps_testing.StaleKeyStore(2, "bsp")
    good = ref.onebit_encode_exact(np.ones(N, np.float32))
    onebit = core.CODECS["onebit"]
    assert store.push_encoded(0, 7, 0, 1, good.tobytes(), N, onebit, no_feedback=True) == []
    with pytest.raises(RuntimeError, match="payload of"):
        store.push_encoded(1, 7, 0, 1, good[:-1].tobytes(), N, onebit, no_feedback=True)
    # The refused push never reached the round: worker 1 pushes again and the sum is 2.
    replies = store.push_encoded(1, 7, 0, 1, good.tobytes(), N, onebit, no_feedback=True)
    assert len(replies) == 2
    for _, _, payload in replies:
        np.testing.assert_array_equal(np.frombuffer(payload, np.uint8),
                                      ref.onebit_encode_exact(np.full(N, 2, np.float32)))

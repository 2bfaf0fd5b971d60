"""onebit's fast paths to the bit: the loops with each instruction set the CPU offers
(core.codec_simd: the scalar loops, and AVX2 where the CPU has it, chosen at run time),
the encoder with error feedback in one pass, and the decoders that add straight into a
sum (the server's round: core.codec_decode_add, onebit and int8). Oracles: NumPy
(codec_reference.onebit_encode_exact models the 8-lane float32 sum of the scale; decode
is NumPy's), and the rule spelled out with the plain encoder and decoder. Odd lengths,
chunk edges, -0, NaN/Inf chunks (decode to NaN throughout; their residual is dropped) and
a scale that overflows."""

import numpy as np
import pytest

import codec_reference as ref
from native import load_core

core = load_core()
CHUNK = core.CODEC_CHUNK
ONEBIT, INT8 = core.CODECS["onebit"], core.CODECS["int8"]
LENGTHS = [0, 1, 7, 8, 9, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17]


def simd_levels():
    best = core.codec_simd("best")
    return ["scalar"] + (["avx2"] if best == "avx2" else [])


@pytest.fixture(params=simd_levels())
def simd(request):
    assert core.codec_simd(request.param) == request.param
    yield request.param
    core.codec_simd("best")


def specials(n, seed):
    """Normal values over a few magnitudes, with -0, +0 and exact ties on chunk edges."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * np.float32(10.0) ** rng.integers(-3, 4, n)).astype(np.float32)
    x[::37] = -0.0
    x[5::41] = 0.0
    return x


def with_non_finite(n):
    x = specials(n, 9)
    if n > CHUNK + 3:
        x[CHUNK + 3] = np.nan  # the second chunk decodes to NaN throughout
    if n > 3 * CHUNK:
        x[3 * CHUNK + 1] = -np.inf  # and the partial last one
    return x


def exact_decode(data, n):
    return ref.decode("onebit", data, n)


def same_floats(got, want):
    """Bit for bit, NaN for NaN (a NaN's sign and payload are the hardware's business)."""
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert got.shape == want.shape
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


@pytest.mark.parametrize("n", LENGTHS)
def test_onebit_encode_and_decode_are_numpys_to_the_bit(simd, n):
    for x in (specials(n, n), with_non_finite(n)):
        got = core.codec_encode(ONEBIT, x)
        want = ref.onebit_encode_exact(x)
        np.testing.assert_array_equal(got, want)
        same_floats(core.codec_decode(ONEBIT, got, n), exact_decode(want, n))


@pytest.mark.parametrize("n", LENGTHS)
def test_decode_add_equals_decode_then_add(simd, n):
    # The server's later pushes: sum + D(push) in one pass, the same float adds as
    # decoding into a buffer and adding (NumPy's float32 add), for onebit and int8.
    rng = np.random.default_rng(n + 1)
    for cid, name in ((ONEBIT, "onebit"), (INT8, "int8")):
        for x in (specials(n, 2 * n + 1), with_non_finite(n)):
            data = core.codec_encode(cid, x)
            total = rng.standard_normal(n).astype(np.float32)
            if n > 2:
                total[1] = np.inf  # an Inf already in the sum stays Inf (or NaN with -Inf)
            with np.errstate(invalid="ignore"):
                want = (total + core.codec_decode(cid, data, n)).astype(np.float32)
                if name == "onebit":
                    same_floats(want, total + exact_decode(data, n))
            same_floats(core.codec_decode_add(cid, data, total), want)
    assert core.codec_decodes_adding(ONEBIT) and core.codec_decodes_adding(INT8)
    assert not core.codec_decodes_adding(core.CODECS["topk"])
    with pytest.raises(ValueError, match="does not decode into a sum"):
        core.codec_decode_add(core.CODECS["fp16"], np.zeros(2 * 4, np.uint8),
                              np.zeros(4, np.float32))


def test_decode_add_refuses_a_payload_of_the_wrong_size():
    with pytest.raises(ValueError, match="expected"):
        core.codec_decode_add(ONEBIT, np.zeros(3, np.uint8), np.zeros(9, np.float32))


@pytest.mark.parametrize("n", [5, CHUNK, 3 * CHUNK + 13])
def test_feedback_encoder_is_the_numpy_rule_to_the_bit(simd, n):
    # p = g + e; send C(p); e <- p - D(C(p)), non-finite residuals dropped to 0: bytes and
    # residual against NumPy over steps with -0, a NaN/Inf chunk and a chunk whose
    # p - (+-scale) overflows.
    rng = np.random.default_rng(n)
    ef, e = core.ErrorFeedback(), np.zeros(n, np.float32)
    for step in range(5):
        g = specials(n, 100 * n + step)
        if step == 2:
            g = with_non_finite(n)
        if n > 2 * CHUNK and step == 3:
            g[2 * CHUNK:3 * CHUNK] = np.float32(3e38)
        with np.errstate(invalid="ignore", over="ignore"):
            p = (e + g).astype(np.float32)
            want = ref.onebit_encode_exact(p)
            r = (p - exact_decode(want, n)).astype(np.float32)
        e = np.where(np.isfinite(r), r, np.float32(0)).astype(np.float32)
        got = ef.encode(3, 0, ONEBIT, g)
        np.testing.assert_array_equal(got, want, err_msg=f"step {step}")
        np.testing.assert_array_equal(ef.residual(3, 0).view(np.uint32), e.view(np.uint32),
                                      err_msg=f"step {step}")


def test_every_instruction_set_gives_the_same_bytes_on_a_large_partition():
    # One 512 KiB partition of gradient-like values, each
    # path through feedback, decode and decode-add: identical across instruction sets.
    n = (1 << 19) // 4 + 333
    rng = np.random.default_rng(5)
    steps = [rng.standard_normal(n).astype(np.float32) * np.float32(1e-3) for _ in range(3)]
    results = {}
    try:
        for level in simd_levels():
            core.codec_simd(level)
            ef, out = core.ErrorFeedback(), []
            for g in steps:
                data = ef.encode(1, 2, ONEBIT, g)
                out += [data, core.codec_decode(ONEBIT, data, n),
                        core.codec_decode_add(ONEBIT, data, g), ef.residual(1, 2)]
            results[level] = out
    finally:
        core.codec_simd("best")
    first = results["scalar"]
    for level, out in results.items():
        for a, b in zip(first, out):
            np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8), err_msg=level)
    np.testing.assert_array_equal(first[0], ref.onebit_encode_exact(steps[0]))


def test_codec_simd_refuses_an_unknown_name():
    with pytest.raises(ValueError, match="scalar, avx2 or best"):
        core.codec_simd("avx9000")

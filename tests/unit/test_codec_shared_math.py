"""The GPU codecs' math, run on the host, against the CPU codecs, bit for bit (issue 16).

tf_ps_ops/cc/codec/codec_math.h holds the codecs' per-element and per-chunk math as
__host__ __device__ functions; the CUDA kernels (codec_gpu.cu.cc) call them, and
codec_shared.cc runs the kernels' algorithms on the host with the same functions and in
the kernels' order (blocks of 256 threads, tree min/max, onebit's 8 lane threads). This
test holds that host twin to the CPU codecs (quantize.cc, float_codecs.cc, sparse_codecs.cc,
error_feedback.cc, onebit's AVX2 and scalar loops): encoded bytes, decoded bits and the
error-feedback residual must be equal. It is the only check of the GPU codecs' logic on a
machine without a GPU (tests/gpu/gpu_checks.py runs the kernels themselves on one)."""

import numpy as np
import pytest

from native import load_core

core = load_core()
CHUNK = core.CODEC_CHUNK
NAMES = ["none", "fp16", "bf16", "int8", "onebit", "topk", "randomk"]
LENGTHS = [1, 7, 8, 9, 255, 257, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17]


def k_for(name, n, ratio=0.07):
    return core.sparse_k(ratio, n) if name in ("topk", "randomk") else 0


def hostile(n, seed):
    """Normal values with the cases where order or rounding shows: +-0 extremes, ties,
    subnormals, fp16 overflow and round-half cases, huge ranges, NaN/Inf chunks."""
    rng = np.random.default_rng(seed)
    kind = seed % 7
    if kind == 0:
        x = rng.standard_normal(n) * 3.0
    elif kind == 1:  # ties of |x| and zeros of both signs as extremes
        x = rng.integers(-3, 4, n).astype(np.float64)
        x[rng.random(n) < 0.3] = -0.0
    elif kind == 2:  # all >= 0 with +-0 the minimum, or all <= 0 with +-0 the maximum
        x = np.abs(rng.standard_normal(n))
        x[rng.random(n) < 0.2] = 0.0
        x[rng.random(n) < 0.2] = -0.0
        if seed % 2:
            x = -x
    elif kind == 3:  # subnormals and values near fp16's edges
        x = rng.choice(np.array([1e-40, -3e-42, 65504.0, 65520.0, -65519.0, 6.1e-5,
                                 5.96e-8, 2.98e-8, 1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11]), n)
    elif kind == 4:  # wide ranges: 255 / (hi - lo) overflows or underflows
        x = rng.standard_normal(n) * 1e-38
        x[::5] = rng.standard_normal(x[::5].size) * 3e38
    elif kind == 5:  # a NaN and an Inf in some chunks
        x = rng.standard_normal(n)
        x[rng.integers(0, n)] = np.nan
        x[rng.integers(0, n)] = -np.inf
    else:  # random bit patterns (finite and not)
        x = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
        return x.copy()
    with np.errstate(over="ignore"):
        return x.astype(np.float32)


def same_bits(a, b, msg):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, msg
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8), err_msg=msg)


def same_floats(a, b, msg):
    """Equal bits, except that any NaN matches any NaN (a NaN's payload is not part of the
    format: fp16/bf16/topk/randomk carry NaN as NaN, int8/onebit chunks decode to NaN)."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    both_nan = np.isnan(a) & np.isnan(b)
    np.testing.assert_array_equal(np.where(both_nan, 0, a.view(np.uint32)),
                                  np.where(both_nan, 0, b.view(np.uint32)), err_msg=msg)


@pytest.fixture(params=["scalar", "avx2"])
def simd(request):
    before = core.codec_simd()
    if core.codec_simd(request.param) != request.param:
        core.codec_simd(before)
        pytest.skip(f"this CPU has no {request.param}")
    yield request.param
    core.codec_simd(before)


@pytest.mark.parametrize("name", NAMES)
def test_shared_math_encodes_and_decodes_as_the_cpu_codec(simd, name):
    cid = core.CODECS[name]
    for n in LENGTHS:
        for seed in range(7):
            x = hostile(n, 1000 * n + seed)
            k = k_for(name, n)
            msg = f"{name} n={n} seed={seed} ({simd})"
            want = core.codec_encode(cid, x, k, seed)
            got = core.codec_shared_encode(cid, x, k, seed)
            same_bits(got, want, msg)
            same_floats(core.codec_shared_decode(cid, want, n, seed),
                        core.codec_decode(cid, want, n, seed), msg)


@pytest.mark.parametrize("name", ["onebit", "topk", "randomk", "int8"])
def test_shared_feedback_is_the_cpu_error_feedback(simd, name):
    # Five steps of one (key, partition): bytes and residual bits against ErrorFeedback.
    cid = core.CODECS[name]
    for n in (9, CHUNK, 2 * CHUNK + 5):
        ef, e = core.ErrorFeedback(), np.zeros(n, np.float32)
        for step in range(5):
            g = hostile(n, 17 * n + step if step != 3 else 5)
            k = k_for(name, n)
            seed = core.randomk_seed(11, 2, step)
            want = ef.encode(11, 2, cid, g, k, seed)
            got, e = core.codec_shared_encode_feedback(cid, g, e, k, seed)
            msg = f"{name} n={n} step={step} ({simd})"
            same_bits(got, want, msg)
            cpu = ef.residual(11, 2)
            if core.codec_wants_error_feedback(cid):
                same_floats(e, cpu, msg)


def test_every_codec_is_covered():
    assert sorted(NAMES) == sorted(core.CODECS)

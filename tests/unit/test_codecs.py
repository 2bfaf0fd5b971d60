"""The codecs of tf_ps_ops/cc/codec against their NumPy models (tests/codec_reference.py):
encoded bytes, decoded values, sizes, the edge cases (empty, odd lengths, partial chunks,
constant chunks) and the NaN/Inf rules of docs/compression.md."""

import numpy as np
import pytest

import codec_reference as ref
from native import load_core

core = load_core()
CHUNK = core.CODEC_CHUNK
NAMES = ["none", "fp16", "bf16", "int8", "onebit", "topk", "randomk"]
LENGTHS = [0, 1, 7, 8, 9, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17]


def k_for(name, n, ratio=0.1):
    return ref.sparse_k(ratio, n) if name in ("topk", "randomk") else 0


def encode(name, x, k=0, seed=0):
    return core.codec_encode(core.CODECS[name], x, k, seed)


def decode(name, data, n, seed=0):
    return core.codec_decode(core.CODECS[name], data, n, seed)


def sample(n, seed=0, scale=3.0):
    return (np.random.default_rng(seed).standard_normal(n) * scale).astype(np.float32)


def assert_same_encoding(name, n, got, want):
    """Byte-exact, except onebit's scales (a float sum in another order: 1e-6 relative)."""
    assert got.size == want.size
    if name != "onebit":
        np.testing.assert_array_equal(got, want)
        return
    chunks = -(-n // CHUNK)
    np.testing.assert_allclose(got[:4 * chunks].view(np.float32),
                               want[:4 * chunks].view(np.float32), rtol=1e-6)
    np.testing.assert_array_equal(got[4 * chunks:], want[4 * chunks:])


def test_the_codec_table():
    assert core.CODECS == {n: i for i, n in enumerate(NAMES)}
    assert CHUNK == ref.CHUNK
    for name in NAMES:
        assert core.codec_wants_error_feedback(core.CODECS[name]) == (
            name in ref.LOSSY_WITH_FEEDBACK)


@pytest.mark.parametrize("text,expected", [
    ("none", (0, 1.0, "none")), ("fp16", (1, 1.0, "fp16")), ("int8", (3, 1.0, "int8")),
    ("onebit", (4, 1.0, "onebit")), ("topk:0.01", (5, 0.01, "topk:0.01")),
    ("randomk:1", (6, 1.0, "randomk:1"))])
def test_parse_codec(text, expected):
    assert core.parse_codec(text) == expected


@pytest.mark.parametrize("text", ["", "int4", "topk", "topk:0", "topk:1.5", "topk:x",
                                  "randomk:-0.1", "int8:3", "topk:nan", "topk:1e-5"])
def test_parse_codec_refuses_bad_names(text):
    with pytest.raises(ValueError, match="InvalidArgument: compression"):
        core.parse_codec(text)


@pytest.mark.parametrize("ratio,n", [(0.01, 0), (0.01, 1), (0.01, 99), (0.01, 100),
                                     (0.01, 101), (0.3, 10), (1.0, 5), (2 ** -16, 1000),
                                     (2 ** -16, 65537)])
def test_sparse_k(ratio, n):
    assert core.sparse_k(ratio, n) == ref.sparse_k(ratio, n)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n", LENGTHS)
def test_encoding_matches_the_numpy_model(name, n):
    x = sample(n, seed=n)
    k, seed = k_for(name, n), 12345 + n
    got = encode(name, x, k, seed)
    want = ref.encode(name, x, k, seed)
    assert got.size == core.encoded_bytes(core.CODECS[name], n, k)
    assert_same_encoding(name, n, got, want)
    np.testing.assert_allclose(decode(name, got, n, seed), ref.decode(name, want, n, k, seed),
                               rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_error_is_what_the_format_allows(name):
    n = 5 * CHUNK + 3
    x = sample(n, seed=3)
    k = k_for(name, n, ratio=0.25)
    y = decode(name, encode(name, x, k, 9), n, 9)
    if name == "none":
        np.testing.assert_array_equal(y, x)
    elif name == "fp16":
        np.testing.assert_allclose(y, x, rtol=2 ** -11)
    elif name == "bf16":
        np.testing.assert_allclose(y, x, rtol=2 ** -8)
    elif name == "int8":
        for c in range(0, n, CHUNK):
            xc = x[c:c + CHUNK]
            half_step = (xc.max() - xc.min()) / 255 / 2
            assert np.abs(y[c:c + CHUNK] - xc).max() <= half_step * (1 + 1e-4)
            assert y[c:c + CHUNK].min() == xc.min()  # the minimum is exact
    elif name == "onebit":
        np.testing.assert_array_equal(np.signbit(y), x < 0)
        for c in range(0, n, CHUNK):
            np.testing.assert_allclose(np.abs(y[c:c + CHUNK]), np.abs(x[c:c + CHUNK]).mean(),
                                       rtol=1e-5)
    else:
        kept = np.flatnonzero(y)
        assert kept.size == k
        np.testing.assert_array_equal(y[kept], x[kept])
        if name == "topk":
            assert np.abs(x[kept]).min() >= np.abs(np.delete(x, kept)).max()


@pytest.mark.parametrize("name", NAMES)
def test_empty_tensors(name):
    data = encode(name, np.zeros(0, np.float32), 0, 1)
    assert data.size == 0
    assert decode(name, data, 0, 1).size == 0


@pytest.mark.parametrize("name", ["int8", "onebit"])
def test_constant_chunks_decode_exactly(name):
    x = np.concatenate([np.full(CHUNK, 2.5, np.float32), np.full(CHUNK, -0.75, np.float32),
                        np.zeros(CHUNK, np.float32), np.full(5, 1e-3, np.float32)])
    y = decode(name, encode(name, x), x.size)
    np.testing.assert_array_equal(y, x)


def test_int8_extremes_of_a_chunk_land_on_the_end_codes():
    x = np.linspace(-1, 3, 1000, dtype=np.float32)
    data = encode("int8", x)
    q = data[8:]
    assert q[0] == 0 and q[-1] == 255
    np.testing.assert_array_equal(data[:8].view(np.float32), [-1, 3])


def test_topk_ties_keep_the_lowest_indices():
    x = np.array([1, -2, 2, 0, -2, 2, 1], np.float32)
    y = decode("topk", encode("topk", x, 2), x.size)
    np.testing.assert_array_equal(y, [0, -2, 2, 0, 0, 0, 0])


def test_randomk_indices_depend_on_the_seed_only():
    x, n, k = sample(5000, 1), 5000, 50
    a = decode("randomk", encode("randomk", x, k, 77), n, 77)
    b = decode("randomk", encode("randomk", sample(5000, 2), k, 77), n, 77)
    c = decode("randomk", encode("randomk", x, k, 78), n, 78)
    assert np.array_equal(np.flatnonzero(a), np.flatnonzero(b))  # other values, same places
    assert not np.array_equal(np.flatnonzero(a), np.flatnonzero(c))
    seed = core.randomk_seed(core.key_of_name("w"), 3, 12)
    assert seed == ref.randomk_seed(core.key_of_name("w"), 3, 12)
    assert seed != core.randomk_seed(core.key_of_name("w"), 3, 13)
    assert seed != core.randomk_seed(core.key_of_name("w"), 4, 12)


def test_randomk_is_uniform_enough():
    n, k, hits = 200, 20, np.zeros(200)
    for step in range(1, 501):
        seed = core.randomk_seed(1, 0, step)
        hits[np.flatnonzero(decode("randomk", encode("randomk", np.ones(n, np.float32), k,
                                                     seed), n, seed))] += 1
    assert hits.sum() == 500 * k
    assert hits.min() > 20 and hits.max() < 80  # expected 50 each


@pytest.mark.parametrize("name", ["fp16", "bf16", "topk", "randomk"])
def test_nan_and_inf_travel_as_values(name):
    x = sample(300, 4)
    x[[5, 100, 250]] = [np.nan, np.inf, -np.inf]
    k = 300 if name == "randomk" else 3  # topk: NaN and Inf rank above every finite value
    y = decode(name, encode(name, x, k, 5), x.size, 5)
    assert np.isnan(y[5]) and y[100] == np.inf and y[250] == -np.inf


def test_fp16_overflow_and_subnormals_match_numpy():
    x = np.array([65504, 65520, 1e6, -1e6, 6e-8, 2e-8, -3e-6, 1e-45, -0.0, np.nan], np.float32)
    y = decode("fp16", encode("fp16", x), x.size)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(y, want)
    assert np.signbit(y[8])


def test_fp16_every_half_value_round_trips():
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    x = h.astype(np.float32)
    y = decode("fp16", encode("fp16", x), x.size)
    finite = ~np.isnan(x)
    np.testing.assert_array_equal(y[finite], x[finite])
    assert np.isnan(y[~finite]).all()


@pytest.mark.parametrize("name", ["int8", "onebit"])
def test_a_non_finite_value_makes_its_chunk_nan_and_only_its_chunk(name):
    x = sample(3 * CHUNK, 6)
    x[CHUNK + 10] = np.inf
    x[2 * CHUNK + 3] = np.nan
    y = decode(name, encode(name, x), x.size)
    assert np.isfinite(y[:CHUNK]).all()
    assert np.isnan(y[CHUNK:]).all()


@pytest.mark.parametrize("name", NAMES)
def test_a_payload_of_the_wrong_size_is_refused(name):
    cid = core.CODECS[name]
    n = 100
    good = core.encoded_bytes(cid, n, 10)
    assert core.check_encoded(cid, n, good) == (10 if name in ("topk", "randomk") else 0)
    for bad in (good - 1, good + 1 if name != "randomk" else good + 3, 0):
        assert "InvalidArgument" in str(core.check_encoded(cid, n, bad))
    with pytest.raises(ValueError, match="InvalidArgument"):
        core.codec_decode(cid, np.zeros(good + 1, np.uint8), n)


def test_a_few_bytes_cannot_stand_for_a_huge_partition():
    # The receiver allocates n floats to decode into: n is bounded per message, and a
    # sparse payload must keep at least n / 65536 elements.
    assert core.check_encoded(core.CODECS["topk"], 65536, 8) == 1
    assert "does not fit" in core.check_encoded(core.CODECS["topk"], 65537, 8)
    assert core.check_encoded(core.CODECS["randomk"], 65537, 8) == 2
    assert "at most" in core.check_encoded(core.CODECS["int8"], (1 << 28) + 1,
                                           core.encoded_bytes(3, (1 << 28) + 1))
    assert core.sparse_k(2 ** -16, 10 ** 6) * 65536 >= 10 ** 6


def test_topk_drops_an_index_out_of_range():
    data = np.concatenate([np.array([3, 1000], np.uint32).view(np.uint8),
                           np.array([1.5, 2.5], np.float32).view(np.uint8)])
    y = decode("topk", data, 10)
    np.testing.assert_array_equal(y, [0, 0, 0, 1.5, 0, 0, 0, 0, 0, 0])


@pytest.mark.parametrize("k", [1, 100, 1234, 2999, 3000, 5000])
def test_topk_selection_with_many_ties_and_specials(k):
    # Few distinct magnitudes (radix buckets full of equal keys), zeros, signed zeros,
    # subnormals, Inf and NaN: the set must be the NumPy model's, lowest index first.
    rng = np.random.default_rng(k)
    x = rng.integers(-3, 4, 5000).astype(np.float32)
    x[rng.integers(0, 5000, 40)] = [np.inf, -np.inf, np.nan, -0.0, 1e-45, -1e-40, 3.0,
                                    -3.0] * 5
    got = encode("topk", x, k)
    np.testing.assert_array_equal(got, ref.encode("topk", x, k))

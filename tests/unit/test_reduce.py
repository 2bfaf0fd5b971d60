"""Server-side summation for every wire dtype, against NumPy."""

import numpy as np
import pytest

from native import load_server_testing

ps_testing = load_server_testing()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.int8, np.uint8])
def test_sum_into_matches_numpy(dtype):
    rng = np.random.default_rng(1)
    a = (rng.standard_normal(1001) * 50).astype(dtype)
    b = (rng.standard_normal(1001) * 50).astype(dtype)
    expected = a + b
    ps_testing.sum_into(a, b)
    np.testing.assert_array_equal(a, expected)


def test_float16_sum_rounds_like_numpy():
    rng = np.random.default_rng(2)
    a = (rng.standard_normal(5000) * 100).astype(np.float16)
    b = (rng.standard_normal(5000) * 100).astype(np.float16)
    extremes = np.array([65504, -65504, 6e-8, -6e-8, 1e-5, np.inf, 0, -0.0], np.float16)
    a = np.concatenate([a, extremes, extremes])
    b = np.concatenate([b, extremes, -extremes])
    with np.errstate(over="ignore", invalid="ignore"):  # inf + -inf is part of the test
        expected = (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)
    ps_testing.sum_into(a, b)
    np.testing.assert_array_equal(a.view(np.uint16), expected.view(np.uint16))


def test_half_conversions_round_trip_every_value():
    for bits in range(0, 1 << 16, 7):
        h = np.array(bits, np.uint16).view(np.float16)
        f = ps_testing.half_to_float(bits)
        if np.isnan(h):
            assert np.isnan(f)
            continue
        assert f == float(h)
        assert ps_testing.float_to_half(f) == bits


def test_float_to_half_rounds_to_nearest_even():
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.standard_normal(3000).astype(np.float32) * s
                             for s in (1e-7, 1e-4, 1.0, 1e3, 7e4)])
    got = np.array([ps_testing.float_to_half(float(v)) for v in values], np.uint16)
    with np.errstate(over="ignore"):  # values above 65504 must become inf, as NumPy's do
        expected = values.astype(np.float16)
    np.testing.assert_array_equal(got, expected.view(np.uint16))


def test_bfloat16_conversion_matches_tensorflow_rounding():
    for f, expected in [(1.0, 0x3F80), (1.00390625, 0x3F80), (1.01171875, 0x3F82),
                        (-2.0, 0xC000), (float("inf"), 0x7F80)]:
        assert ps_testing.float_to_bfloat16(f) == expected, f
    assert ps_testing.bfloat16_to_float(0x3F80) == 1.0

"""Summation rounds over borrowed pushes (TFPS_SHM_SERVER: a colocated worker's shared
memory, summed in place by ps_server/sum_rounds.cc): the server never writes a borrowed
buffer, the answer lives in its own memory, and the result has the same bits as adding
the pushes in arrival order into a buffer of its own, for every reduce op."""

import itertools

import numpy as np
import pytest

from native import load_server_testing

OPS = {0: np.add, 1: np.minimum, 2: np.maximum, 3: np.multiply}


def arrival_order_fold(arrays, op):
    acc = arrays[0].copy()
    for a in arrays[1:]:
        acc = OPS[op](acc, a)
    return acc


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("n", [1, 2, 3])
def test_borrowed_pushes_are_read_in_place_and_never_written(dtype, op, n):
    core = load_server_testing()
    rng = np.random.default_rng(17 + n)
    for borrowed in itertools.product([False, True], repeat=n):
        arrays = [(rng.standard_normal(1001) * 100).astype(dtype) for _ in range(n)]
        if dtype != np.int32:
            arrays[0][0] = np.nan  # NaNs propagate
            for i, a in enumerate(arrays):  # min/max of signed zeros keep their first operand
                a[1] = -0.0 if i % 2 == 0 else 0.0
        before = [a.copy() for a in arrays]
        owned, _ = core.sum_round(arrays, [False] * n, op)  # into memory of its own
        got, still_borrowed = core.sum_round(arrays, list(borrowed), op)
        for a, b in zip(arrays, before):  # no push was written, borrowed or not
            assert a.tobytes() == b.tobytes(), borrowed
        assert not still_borrowed, borrowed
        owned, got = np.frombuffer(owned, dtype), np.frombuffer(got, dtype)
        # The oracle: NumPy's fold in arrival order (values; -0 == +0 there)...
        assert np.array_equal(owned, arrival_order_fold(before, op),
                              equal_nan=dtype != np.int32), op
        # ...and borrowing changes no bit (signed zeros included), NaN payloads aside.
        real = ~np.isnan(owned) if dtype != np.int32 else np.ones(owned.shape, bool)
        assert np.array_equal(real, ~np.isnan(got)) if dtype != np.int32 else True
        assert got[real].tobytes() == owned[real].tobytes(), (borrowed, op)

"""NumPy model of Horovod's Adasum (horovod/common/ops/adasum/adasum.h, ScaledAdd after
ComputeDotAndNormSqrds): a pair combines as (1 - a.b/(2|a|^2)) a + (1 - a.b/(2|b|^2)) b,
a coefficient being 1 when that squared norm is below 1e-8; ranks reduce along the tree
that recursive halving with distance doubling walks (partner = rank XOR distance)."""

import numpy as np


def combine(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    dot, a_sq, b_sq = float(a @ b), float(a @ a), float(b @ b)
    a_coeff = 1.0 - dot / a_sq * 0.5 if a_sq >= 1e-8 else 1.0
    b_coeff = 1.0 - dot / b_sq * 0.5 if b_sq >= 1e-8 else 1.0
    return a_coeff * a + b_coeff * b


def adasum(vectors):
    """Horovod's result on every rank for len(vectors) ranks (a power of two): at distance
    d = 1, 2, 4, ..., rank r combines with rank r ^ d (lower rank's vector first)."""
    n = len(vectors)
    assert n & (n - 1) == 0, "Horovod's recursive halving needs a power of two"
    held = [np.asarray(v, np.float64).ravel() for v in vectors]
    distance = 1
    while distance < n:
        held = [combine(held[min(r, r ^ distance)], held[max(r, r ^ distance)])
                for r in range(n)]
        distance *= 2
    assert all(np.array_equal(h, held[0]) for h in held)
    return held[0]

"""op=Adasum's tree (tf_ps_ops/collectives/adasum.py) against the NumPy model of Horovod's recursive
halving (tests/adasum_reference.py), for 1 to 8 workers, without a cluster."""

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import adasum_reference as ref  # noqa: E402
from tf_ps_ops.collectives import adasum  # noqa: E402


@pytest.mark.parametrize("workers", [1, 2, 4, 8])
def test_tree_matches_horovods_recursive_halving(workers):
    rng = np.random.default_rng(workers)
    vectors = [rng.standard_normal(257) * (r + 1) for r in range(workers)]
    got = adasum._tree([tf.constant(v) for v in vectors]).numpy()
    np.testing.assert_allclose(got, ref.adasum(vectors), rtol=1e-12, atol=1e-12)


def test_orthogonal_vectors_add_and_equal_ones_average():
    a, b = np.array([1.0, 0.0]), np.array([0.0, 2.0])
    np.testing.assert_allclose(adasum._combine(tf.constant(a), tf.constant(b)), a + b)
    np.testing.assert_allclose(adasum._combine(tf.constant(a), tf.constant(a)), a)


def test_a_zero_vector_keeps_the_other():
    a, zero = np.array([3.0, -1.0]), np.zeros(2)
    np.testing.assert_allclose(adasum._combine(tf.constant(zero), tf.constant(a)), a)
    np.testing.assert_allclose(ref.combine(zero, a), a)

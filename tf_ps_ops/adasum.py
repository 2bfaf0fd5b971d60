"""Horovod's Adasum reduction (op=Adasum), through the peer mesh.

Adasum combines two gradients a and b as
    (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
(a coefficient is 1 when that vector's squared norm is below 1e-8), and reduces the
workers' gradients along a binary tree: ranks (0, 1), (2, 3), ... first, then those pairs'
results, and so on, which is what Horovod's recursive halving computes for a power-of-two
number of workers (an odd one out at some level is carried up unchanged).

Summing servers cannot compute it (each combination needs dot products of whole vectors),
so every worker allgathers every gradient peer to peer and evaluates the same tree, in
float64, in rank order: every worker gets the same result. That moves size() times the
data of a ring; fine for the moderate sizes Adasum is used with, and exact to the formula.
"""

import tensorflow as tf

_TINY = 1e-8  # Horovod's threshold below which a squared norm counts as zero


def _combine(a, b):
    dot = tf.reduce_sum(a * b)
    a_sq, b_sq = tf.reduce_sum(a * a), tf.reduce_sum(b * b)
    a_coeff = tf.where(a_sq >= _TINY, 1.0 - dot / (2.0 * tf.maximum(a_sq, _TINY)), 1.0)
    b_coeff = tf.where(b_sq >= _TINY, 1.0 - dot / (2.0 * tf.maximum(b_sq, _TINY)), 1.0)
    return a_coeff * a + b_coeff * b


def _tree(parts):
    while len(parts) > 1:
        combined = [_combine(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]
        if len(parts) % 2:
            combined.append(parts[-1])
        parts = combined
    return parts[0]


def adasum_allreduce(tensor, key, process_set=None):
    """The Adasum of every worker's `tensor` (a floating-point tensor), under `key`: of
    every worker, or of `process_set`'s members (in rank order)."""
    from tf_ps_ops import process_sets
    from tf_ps_ops.ops import allgather

    size = lambda: process_sets.set_size(process_set)  # noqa: E731

    if not tensor.dtype.is_floating:
        raise ValueError(f"op=Adasum needs a floating-point tensor, got {tensor.dtype.name}")

    @tf.custom_gradient
    def reduce(x):
        gathered = allgather(tf.reshape(x, [1, -1]), name=key + ".adasum",
                             process_set=process_set)
        flat = tf.cast(gathered, tf.float64)
        result = _tree([flat[i] for i in range(size())])
        out = tf.reshape(tf.cast(result, x.dtype), tf.shape(x))

        def grad(upstream):
            raise NotImplementedError("allreduce with op=Adasum has no gradient: reduce "
                                      "gradients with it, not values you differentiate")

        return out, grad

    return reduce(tensor)

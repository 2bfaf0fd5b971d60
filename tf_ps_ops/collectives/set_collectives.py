"""allgather and alltoall within a process set, through the servers.

The peer mesh (engine/peer_mesh.h) exchanges with every worker; a process set's gather
goes through the servers' summation rounds instead, which already complete when the set's
members have pushed (ps_server/process_sets.h). Each member pushes its rows at its place in
a tensor of everyone's rows, zeros elsewhere, and the servers' sum is the concatenation.
Cost: every member sends and receives the whole result (set size x a peer gather's data);
exact for every dtype (x + 0 = x; bools sum as a logical or), except that a float -0.0
comes back as +0.0.
"""

import tensorflow as tf

from tf_ps_ops.common import library as _library
from tf_ps_ops.common.basics import rank


def _sum(tensor, key, members):
    return _library.ops().ps_push_pull(tensor, [], tensor_name=key, process_set=members)


def _place(tensor, key, members):
    """The members' `tensor`s concatenated along the first dimension, in rank order, and
    where this worker's rows start in it."""
    me = members.index(rank())
    rows = tf.shape(tensor, out_type=tf.int64)[0]
    counts = _sum(tf.one_hot(me, len(members), dtype=tf.int64) * rows, key + ".rows", members)
    start = tf.reduce_sum(counts[:me])
    after = tf.reduce_sum(counts) - start - rows
    padding = tf.concat([tf.stack([start, after])[tf.newaxis],
                         tf.zeros(tf.stack([tf.rank(tensor) - 1, 2]), tf.int64)], axis=0)
    return _sum(tf.pad(tensor, padding), key, members), start, rows


def set_allgather(tensor, key, members, average_gradient=True):
    """allgather among `members`. Its gradient is Horovod 0.28's: the upstream gradient
    averaged over the set, this worker's rows of it (`average_gradient=False`: summed,
    which alltoall needs)."""

    @tf.custom_gradient
    def gather(x):
        gathered, start, rows = _place(x, key, members)

        def grad(upstream):
            reduced = _sum(tf.convert_to_tensor(upstream), key + ".grad", members)
            if average_gradient:
                reduced = reduced / tf.cast(len(members), reduced.dtype) \
                    if not reduced.dtype.is_integer else reduced // len(members)
            return reduced[start:start + rows]

        return gathered, grad

    if not tensor.dtype.is_floating:  # no gradient to carry
        return _place(tensor, key, members)[0]
    return gather(tensor)


def set_alltoall(tensor, splits, key, members):
    """alltoall among `members` (splits: one entry per member, or None for equal parts):
    every member gathers every member's sent rows and keeps those meant for it."""
    n = len(members)
    me = members.index(rank())
    rows = tf.shape(tensor, out_type=tf.int64)[0]
    if splits is None:
        tf.debugging.assert_equal(rows % n, tf.constant(0, tf.int64), message=(
            f"alltoall without splits: the first dimension must be a multiple of the process "
            f"set's size {n}"))
        splits = tf.fill([n], rows // n)
    splits = tf.cast(tf.reshape(splits, [-1]), tf.int64)
    tf.debugging.assert_equal(tf.size(splits, out_type=tf.int64), tf.constant(n, tf.int64),
                              message=f"alltoall: splits needs one entry per member ({n})")
    tf.debugging.assert_non_negative(splits, message="alltoall: splits must not be negative")
    tf.debugging.assert_less_equal(tf.reduce_sum(splits), rows, message=(
        "alltoall: splits sum to more than the first dimension"))
    all_splits = tf.reshape(set_allgather(splits[tf.newaxis], key + ".splits", members), [n, n])
    sent = tensor[:tf.reduce_sum(splits)]
    gathered = set_allgather(sent, key, members, average_gradient=False)
    starts = tf.concat([[0], tf.cumsum(tf.reduce_sum(all_splits, axis=1))[:-1]], axis=0)
    parts = []
    for sender in range(n):
        offset = starts[sender] + tf.reduce_sum(all_splits[sender, :me])
        parts.append(gathered[offset:offset + all_splits[sender, me]])
    return tf.concat(parts, axis=0), tf.cast(all_splits[:, me], tf.int32)

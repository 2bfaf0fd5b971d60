"""Horovod's Adasum reduction (op=Adasum), through the peer mesh.

Adasum combines two gradients a and b as
    (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
(a coefficient is 1 when that vector's squared norm is below 1e-8), and reduces the
workers' gradients along a binary tree: ranks (0, 1), (2, 3), ... first, then those pairs'
results, and so on.

For a power-of-two number of workers (global set, a shape known when the graph is built)
this runs as Horovod's CPU Adasum does, by recursive vector halving and distance doubling:
  - at distance d = 1, 2, 4, ... a worker and its partner (rank XOR d) hold the same
    segment of their blocks' vectors; the lower rank keeps the first half and sends the
    second, the higher one the reverse (PsAlltoall, with one non-zero split);
  - each worker computes a.b, |a|^2 and |b|^2 on its half (a: the lower block's vector);
    the 2d workers of the merged block sum those three numbers (a small allgather), so
    each has the dot products of the whole vectors, and combines its half;
  - at the end every worker holds 1/size of the result; an allgather puts it together.
A worker receives about 2 (size - 1) / size of the tensor's bytes (half of it on the way
down, the rest on the way up) plus 24 bytes per level and peer, where gathering every
worker's whole tensor received size - 1 times it (benchmarks/collective_bytes.py).

Inside a process set, or for a shape unknown when the graph is built, every member
allgathers every gradient and evaluates the same tree. A number of workers (or members)
that is not a power of two is refused with NotImplementedError, as Horovod's VHDD refuses
it ("Running Adasum with non-power-of-two ranks is not supported yet", adasum.h).

Tensors travel in their own dtype (float16/bfloat16 as float32); dot products and
combinations are computed in float64 (by halving: rounded to the dtype at each level, as
Horovod's buffer is). The gradient is the Adasum of the
upstream gradients, as Horovod 0.28's _allreduce_grad (the forward op on the gradient).
"""

import tensorflow as tf

from tf_ps_ops.collectives import process_sets, raw
from tf_ps_ops.common.basics import rank

_TINY = 1e-8  # Horovod's threshold below which a squared norm counts as zero


def _coefficients(dot, a_sq, b_sq):
    a_coeff = tf.where(a_sq >= _TINY, 1.0 - dot / (2.0 * tf.maximum(a_sq, _TINY)), 1.0)
    b_coeff = tf.where(b_sq >= _TINY, 1.0 - dot / (2.0 * tf.maximum(b_sq, _TINY)), 1.0)
    return a_coeff, b_coeff


def _combine(a, b):
    a_coeff, b_coeff = _coefficients(tf.reduce_sum(a * b), tf.reduce_sum(a * a),
                                     tf.reduce_sum(b * b))
    return a_coeff * a + b_coeff * b


def _tree(parts):
    while len(parts) > 1:
        combined = [_combine(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]
        if len(parts) % 2:
            combined.append(parts[-1])
        parts = combined
    return parts[0]


def segments(length, size):
    """[(offset, count)] that each rank holds at the end of the halving: a pure function
    of the length and the number of workers, so every worker knows everyone's."""
    held = [(0, length)] * size
    distance = 1
    while distance < size:
        step = []
        for rank in range(size):
            offset, count = held[rank]
            half = count // 2
            lower = rank < (rank ^ distance)
            step.append((offset, half) if lower else (offset + half, count - half))
        held = step
        distance *= 2
    return held


def _vhdd(flat, key, size, rank):
    # `flat` travels in its own dtype; dot products and combinations are float64, cast
    # back to it at each level (as Horovod keeps its buffer in the tensor's dtype).
    length = int(flat.shape[0])
    offset, count, held = 0, length, flat
    distance, level = 1, 0
    while distance < size:
        partner = rank ^ distance
        half = count // 2
        lower = rank < partner
        keep_from, keep_count = (0, half) if lower else (half, count - half)
        give = held[half:] if lower else held[:half]
        splits = [0] * size
        splits[partner] = count - keep_count
        received, _ = raw.alltoall(give, tf.constant(splits, tf.int64), f"{key}.vhdd.{level}")
        mine = tf.cast(held[keep_from:keep_from + keep_count], tf.float64)
        received = tf.cast(received, tf.float64)
        a, b = (mine, received) if lower else (received, mine)
        partial = tf.stack([tf.reduce_sum(a * b), tf.reduce_sum(a * a), tf.reduce_sum(b * b)])
        every = raw.allgather(tf.reshape(partial, [1, 3]), f"{key}.vhdd.{level}.dots")
        first = rank - rank % (2 * distance)
        group = every[first]
        for member in range(first + 1, first + 2 * distance):
            group = group + every[member]
        a_coeff, b_coeff = _coefficients(group[0], group[1], group[2])
        held = tf.cast(a_coeff * a + b_coeff * b, flat.dtype)
        offset, count = offset + keep_from, keep_count
        distance, level = distance * 2, level + 1
    pieces = raw.allgather(held, f"{key}.vhdd.gather")
    where = segments(length, size)
    starts, at = [], 0
    for _, n in where:
        starts.append(at)
        at += n
    order = sorted(range(size), key=lambda r: where[r][0])
    return tf.concat([pieces[starts[r]:starts[r] + where[r][1]] for r in order], 0)


def _adasum(x, key, process_set, halving=True):
    size = process_sets.set_size(process_set)
    # What travels: the tensor's own dtype (16-bit floats as float32).
    wire = x.dtype if x.dtype in (tf.float32, tf.float64) else tf.float32
    flat = tf.reshape(tf.cast(x, wire), [-1])
    power_of_two = size & (size - 1) == 0
    if (halving and size > 1 and power_of_two and flat.shape.is_fully_defined() and
            not process_sets.key_prefix(process_set)):
        result = _vhdd(flat, key, size, rank())
    else:
        # The key as ops.allgather made it: the set's prefix before a key that has it.
        gathered = raw.allgather(tf.reshape(flat, [1, -1]),
                                 process_sets.key_prefix(process_set) + key + ".adasum",
                                 process_sets.members(process_set, "allgather"))
        gathered = tf.cast(gathered, tf.float64)
        result = _tree([gathered[i] for i in range(size)])
    return tf.reshape(tf.cast(result, x.dtype), tf.shape(x))


def adasum_allreduce(tensor, key, process_set=None):
    """The Adasum of every worker's `tensor` (a floating-point tensor), under `key`: of
    every worker, or of `process_set`'s members (in rank order)."""
    if not tensor.dtype.is_floating:
        raise ValueError(f"op=Adasum needs a floating-point tensor, got {tensor.dtype.name}")
    size = process_sets.set_size(process_set)
    if size & (size - 1):
        raise NotImplementedError(
            f"op=Adasum needs a power-of-two number of workers, got {size}"
            f"{'' if process_sets.key_prefix(process_set) == '' else ' in this process set'}: "
            "as Horovod (\"Running Adasum with non-power-of-two ranks is not supported "
            "yet\"), the recursive halving pairs every rank at every level; use op=Average "
            "or a process set of 2, 4, 8, ... workers")

    @tf.custom_gradient
    def reduce(x):
        def grad(upstream):
            return _adasum(tf.convert_to_tensor(upstream), key + ".grad", process_set)

        return _adasum(x, key, process_set), grad

    return reduce(tensor)

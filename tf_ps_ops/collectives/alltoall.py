"""Horovod's alltoall, reducescatter and grouped collectives.

Where the data goes:
  - alltoall: peer to peer (the PsAlltoall op over the mesh that serves allgather,
    engine/peer_mesh.h): each worker sends every other worker only the rows meant for it.
  - reducescatter: peer to peer (PsAlltoall): each worker sends every other worker only
    that worker's rows (Horovod's split) and sums, in rank order, the rows it receives. A
    worker receives (size - 1) / size of the tensor's bytes, all of them its own rows, where
    the servers' summation round sent it the whole sum (benchmarks/reducescatter_bytes.py).
    Inside a non-global process set, or with a core wire codec (int8, onebit, topk, ...),
    it still goes through the servers: an allreduce of which each worker keeps its rows.
  - grouped_*: one collective per tensor, issued together (Horovod fuses them; here each
    tensor is its own key, and small ones share messages through the engine's fusion).
Keys follow ops.py: `name`, or the input's name in a graph, or one fixed key per kind
eagerly (every worker's n-th eager call meets the others' n-th).
"""

import functools
import inspect

import tensorflow as tf

from tf_ps_ops.collectives.abort import guarded
from tf_ps_ops.collectives.compression import Compression
from tf_ps_ops.collectives.ops import (Average, Sum, _average, _call_key, _check_not_xla,
                           _check_process_set, _resolve_op, _scale, _set_key, allgather,
                           allreduce, global_process_set)
from tf_ps_ops.collectives.process_sets import set_size
from tf_ps_ops.common import library as _library
from tf_ps_ops.common.basics import rank, size

_EAGER_KEYS = {"alltoall": "alltoall.eager", "reducescatter": "reducescatter.eager"}
_GRAPH_PREFIXES = {"alltoall": "HorovodAlltoall_", "reducescatter": "HorovodReducescatter_"}


def _key(kind, name, tensor):
    if name is not None:
        return name
    if tf.executing_eagerly():
        return _EAGER_KEYS[kind]
    return _GRAPH_PREFIXES[kind] + "".join(c if c.isalnum() or c == "_" else "_"
                                           for c in tensor.name)


@guarded("peer", _call_key("alltoall", lambda kind, name, tensor: _key(kind, name, tensor)))
def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Sends `splits[p]` consecutive rows of `tensor` (from row 0 on) to worker p and
    returns the rows every worker sent to this one, concatenated in rank order. As in
    Horovod 0.28, with `splits` given it returns `(received, received_splits)`, the second
    saying how many rows came from each worker (int32); without `splits`, `received` alone.

    `splits` (one entry per worker, int32 or int64) may contain zeros, and its sum may be
    less than the first dimension (the rest is not sent); without it the first dimension
    is split into size() equal parts and must be a multiple of size() (InvalidArgumentError
    otherwise). Every worker's dtype and dimensions but the first must agree
    (FailedPreconditionError on every worker otherwise). Within a process set, `splits`
    has one entry per member, in the set's rank order, and the exchange goes through the
    servers (tf_ps_ops/collectives/set_collectives.py).
    """
    members = _check_process_set(process_set, "alltoall")
    _check_not_xla()
    tensor = tf.convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        raise ValueError("alltoall needs a tensor with at least one dimension, got a scalar")
    if members is not None:
        from tf_ps_ops.collectives.set_collectives import set_alltoall
        received, received_splits = set_alltoall(
            tensor, splits, _set_key(process_set, _key("alltoall", name, tensor)), members)
    else:
        received, received_splits = _library.ops().ps_alltoall(
            tensor, _splits_tensor(splits), tensor_name=_key("alltoall", name, tensor))
    return received if splits is None else (received, received_splits)


def _splits_tensor(splits):
    if splits is None:
        return tf.zeros([0], tf.int32)  # the op splits equally
    splits = tf.convert_to_tensor(splits)
    return splits if splits.dtype in (tf.int32, tf.int64) else tf.cast(splits, tf.int64)


@tf.RegisterGradient("PsAlltoall")
def _alltoall_grad(op, grad, _received_splits_grad):
    # Every received row's gradient goes back to the worker that sent it: an alltoall with
    # the received splits. Rows that were never sent (splits summing to less than the first
    # dimension) get zeros.
    key = tf.compat.as_str(op.get_attr("tensor_name")) + ".grad"
    back, _ = _library.ops().ps_alltoall(tf.convert_to_tensor(grad), op.outputs[1],
                                         tensor_name=key)
    missing = tf.shape(op.inputs[0])[0] - tf.shape(back)[0]
    padding = [[0, missing]] + [[0, 0]] * (len(op.inputs[0].shape) - 1)
    splits_grad = None if op.inputs[1].shape.num_elements() == 0 else \
        tf.zeros_like(op.inputs[1])
    return [tf.pad(back, padding), splits_grad]


def _rows_of(rank_, size_, rows):
    # Horovod's split: the first (rows % size) workers get one row more.
    rank_ = tf.constant(rank_, rows.dtype)
    base, extra = rows // size_, rows % size_
    start = rank_ * base + tf.minimum(rank_, extra)
    count = base + tf.cast(rank_ < extra, rows.dtype)
    return start, count


def _peer_reducescatter_path(arguments):
    # The path an abort of this call takes: the peer mesh unless the call goes through the
    # servers (a process set, whose non-members are told nothing anyway, or a core codec).
    return "server" if _through_servers(arguments.get("compression")) else "peer"


def _through_servers(compression):
    # Horovod's own compressors (none, fp16) apply in TensorFlow around the exchange; the
    # core codecs (int8, onebit, topk, ...) exist only inside the servers' summation.
    from tf_ps_ops.collectives.compression import HorovodFP16Codec
    return not isinstance(compression, HorovodFP16Codec) and \
        getattr(compression, "wire", "") not in ("", "none")


def _guarded_reducescatter(function):
    # abort.guarded, with the path of the call's own exchange.
    key_of = _call_key("reducescatter", lambda kind, name, tensor: _key(kind, name, tensor))
    by_peer = guarded("peer", key_of)(function)
    by_server = guarded("server", key_of)(function)
    signature = inspect.signature(function)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        path = _peer_reducescatter_path(bound.arguments)
        return (by_server if path == "server" else by_peer)(*args, **kwargs)

    return wrapper


@_guarded_reducescatter
def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average,
                  name=None, process_set=global_process_set, prescale_factor=1.0,
                  postscale_factor=1.0, ignore_name_scope=False):
    """Reduces `tensor` over every worker (op=Sum or Average) and returns this worker's
    rows of the result: the first dimension is cut into size() parts, the first
    (rows % size()) workers getting one row more, as Horovod does (a worker past the rows
    gets an empty slice). Shapes and dtypes must agree (FailedPreconditionError otherwise).
    Each worker receives only its rows (peer to peer, module docstring). Differentiable,
    with Horovod 0.28's gradient: every worker's upstream gradient gathered, multiplied by
    size() for op=Sum (not divided for Average) and by the scale factors."""
    op = _resolve_op(op, None)
    if op not in (Average, Sum):
        raise ValueError("reducescatter supports op=Average and op=Sum only (as Horovod)")
    members = _check_process_set(process_set, "reducescatter")
    with tf.device(device_dense):
        tensor = tf.convert_to_tensor(tensor)
        if tensor.shape.rank == 0:
            raise ValueError("reducescatter needs a tensor with at least one dimension")
        if tensor.dtype == tf.bool:
            raise ValueError("reducescatter of a bool tensor is not supported (as Horovod): "
                             "cast it to an integer type")
        key = _key("reducescatter", name, tensor)

        def reduce(tensor):
            if members is not None or _through_servers(compression):
                mine = _reducescatter_by_servers(tensor, compression, key, process_set,
                                                 members, prescale_factor)
            else:
                mine = _reducescatter_by_peers(tensor, compression, key, prescale_factor)
            if op == Average:
                mine = _average(mine, members)
            return _scale(mine, postscale_factor) if postscale_factor != 1.0 else mine

        scale = prescale_factor * postscale_factor
        return _with_horovod_gradient(reduce, tensor, key, process_set,
                                      scale * (set_size(process_set) if op == Sum else 1))


def _with_horovod_gradient(reduce, tensor, key, process_set, scale):
    """reduce(tensor) with Horovod 0.28's reducescatter gradient (its _reducescatter_grad):
    the upstream gradients of every worker, each multiplied by `scale`, gathered."""
    @tf.custom_gradient
    def forward(x):
        def gradient(upstream):
            if scale != 1.0:
                upstream = _scale(upstream, scale)
            return allgather(upstream, name=key + ".grad", process_set=process_set)
        return reduce(x), gradient
    return forward(tensor)


def _reducescatter_by_servers(tensor, compression, key, process_set, members, prescale):
    summed = allreduce(tensor, op=Sum, compression=compression, name=key,
                       prescale_factor=prescale, process_set=process_set)
    me, count_ = (rank(), size()) if members is None else \
        (members.index(rank()), len(members))
    start, count = _rows_of(me, count_, tf.shape(summed, out_type=tf.int64)[0])
    return summed[start:start + count]


def _agreed_rows(rows, key):
    # Every worker's first dimension, gathered (8 bytes from each peer; in a graph only
    # a shape, below): with different ones the split would differ between workers, and a
    # worker could get a wrong slice without noticing. Every worker sees the same list, so
    # all fail together, before the exchange (the servers' path reports this as its shape
    # mismatch). It goes under the call's own key: a worker that raised before the call
    # (abort.guarded) tells the others under that key, and they are waiting here.
    if tf.executing_eagerly():
        values = allgather(tf.reshape(rows, [1]), name=key).numpy().tolist()
        if any(v != values[0] for v in values):
            raise tf.errors.FailedPreconditionError(
                None, None, f"reducescatter {key!r}: the workers' first dimensions differ "
                f"(rank order): {values}; every worker must pass a tensor of the same shape")
        return rows
    # In a graph the allgather op's own shape check says it, with the FailedPreconditionError
    # of Horovod's mismatches (a tf.debugging assertion raises InvalidArgumentError, and a
    # py_function's error turns Unknown inside a tf.function): an empty tensor whose second
    # dimension is `rows` carries no data.
    probe = allgather(tf.zeros(tf.stack([tf.constant(1, rows.dtype), 0, rows]), tf.int8),
                      name=key)
    with tf.control_dependencies([probe]):
        return tf.identity(rows)


def _reducescatter_by_peers(tensor, compression, key, prescale):
    size_, me = size(), rank()
    sent, ctx = compression.compress(_scale(tensor, prescale))
    rows = _agreed_rows(tf.shape(sent, out_type=tf.int64)[0], key)
    splits = tf.stack([_rows_of(r, size_, rows)[1] for r in range(size_)])
    received, _ = _library.ops().ps_alltoall(sent, splits, tensor_name=key + ".data")
    # Every worker sent this one the same number of rows (its slice): sum them in rank
    # order, so the result is what NumPy's sum over the workers' arrays gives.
    count = _rows_of(me, size_, rows)[1]
    parts = tf.reshape(received, tf.concat([[size_, count],
                                            tf.shape(received, out_type=tf.int64)[1:]], 0))
    total = parts[0]
    for r in range(1, size_):
        total = total + parts[r]
    return compression.decompress(total, ctx)


def _group_keys(tensors, name, kind):
    if name:
        return [f"{name}.{index}" for index in range(len(tensors))]
    if tf.executing_eagerly():
        return [f"{kind}.eager.{index}" for index in range(len(tensors))]
    return [None] * len(tensors)


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """allgather of each tensor in a list; the results in the same order."""
    _check_process_set(process_set, "grouped_allgather")
    keys = _group_keys(tensors, name, "grouped_allgather")
    return [allgather(tensor, name=key, process_set=process_set)
            for tensor, key in zip(tensors, keys)]


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          name=None, process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """reducescatter of each tensor in a list; the results in the same order."""
    keys = _group_keys(tensors, name, "grouped_reducescatter")
    return [reducescatter(tensor, device_dense, compression, op, key, process_set,
                          prescale_factor, postscale_factor)
            for tensor, key in zip(tensors, keys)]

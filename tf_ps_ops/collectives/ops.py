"""Collective operations (Horovod/BytePS API) on top of the PsPushPull and PsBroadcast ops.

Keys: workers' tensors meet on the servers by key (`tensor_name`) and by how many times
that key was used, so every worker must use the same keys in the same order.
  - A given `name` is the key.
  - In a graph (tf.function) the key comes from the input tensor's name, as in Horovod:
    the same program builds the same graph on every worker.
  - Eagerly, tensors have no names: each operation kind uses one fixed key per thread
    (eager_keys.py), and the n-th eager call of a thread on one worker meets the n-th
    eager call of the thread of the same name on the others.

Variables and Python objects (broadcast_variables, broadcast_object, allgather_object, ...)
go through these operations in objects.py.
"""

import re

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import control_flow_util

from tf_ps_ops.collectives import process_sets as _process_sets
from tf_ps_ops.collectives import raw
from tf_ps_ops.collectives.abort import guarded
from tf_ps_ops.collectives.adasum import adasum_allreduce
from tf_ps_ops.collectives.compression import (Compression, wire_codec, wire_compress,
                                               wire_decompress)
from tf_ps_ops.collectives.eager_keys import eager_key
from tf_ps_ops.collectives.process_sets import global_process_set
from tf_ps_ops.common import elastic_epoch as _elastic_epoch
from tf_ps_ops.common import library as _library
from tf_ps_ops.common.basics import rank, size

# Reduction ops, with Horovod's values so code that compares or logs them keeps working.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5


def _check_process_set(process_set, what="this collective"):
    # The set's ranks (None: every worker); ValueError if this worker is not a member.
    return _process_sets.members(process_set, what)


def _set_key(process_set, key):
    return _process_sets.key_prefix(process_set) + key


def _set_size(members):
    return size() if members is None else len(members)


_EAGER_KEYS = {
    "allreduce": "push_pull.eager",
    "broadcast": "broadcast.eager",
    "allgather": "allgather.eager",
}
_GRAPH_PREFIXES = {
    "allreduce": "HorovodAllreduce_",
    "broadcast": "HorovodBroadcast_",
    "allgather": "HorovodAllgather_",
}


def _key(kind, name, tensor):
    if name is not None:
        return name
    if tf.executing_eagerly():
        return eager_key(_EAGER_KEYS[kind], kind)
    return _GRAPH_PREFIXES[kind] + re.sub(r"[^a-zA-Z0-9_]", "_", tensor.name)


def _call_key(kind, key=None, skip=lambda arguments: False):
    """For abort.guarded: the key of a call from its arguments (`key(kind, name, tensor)`,
    default _key), without converting the tensor eagerly (it may be what was refused)."""
    key = key or _key

    def key_of(arguments):
        if skip(arguments) or _process_sets.key_prefix(arguments.get("process_set")):
            # Inside a process set a non-member's error is its own (Horovod's ValueError),
            # and the members' round must not fail for it: nothing is told.
            return None
        name = arguments.get("name")
        tensor = arguments.get("tensor")
        if name is None and not tf.executing_eagerly():
            tensor = _dense(tensor)
        return key(kind, name, tensor)

    return key_of


def _check_not_xla():
    # Tracing under jit_compile would otherwise fail later, in XLA, with a message about a
    # missing kernel that does not say what to change.
    graph = tf.compat.v1.get_default_graph()
    if not tf.executing_eagerly() and control_flow_util.GraphOrParentsInXlaContext(graph):
        raise RuntimeError(
            "tf_ps_ops communication ops have no XLA kernels: run them without XLA, i.e. "
            "model.compile(..., jit_compile=False) (Keras' default 'auto' turns XLA on "
            "where there is a GPU) or tf.function(jit_compile=False)")


def _dense(tensor):
    # For keys and for the ops that take dense tensors only (broadcast): a
    # tf.IndexedSlices becomes its dense tensor.
    return tf.convert_to_tensor(tensor)


def _allreduce_slices(slices, op, name, members, process_set):
    # As Horovod does for every IndexedSlices, whatever its dense_shape: gather values and
    # indices from every worker (only the touched rows travel, peer to peer); the caller
    # sums the duplicates when it applies them (scatter-add, or tf.convert_to_tensor).
    if name is None and not tf.executing_eagerly():
        # A key from an op made here: a tensor captured from outside the graph has a
        # placeholder named after its id, which differs between workers.
        name = _key("allreduce", None, tf.identity(slices.values, name="IndexedSlicesValues"))
    values = allgather(slices.values, name=None if name is None else name + ".values",
                       process_set=process_set)
    indices = allgather(slices.indices, name=None if name is None else name + ".indices",
                        process_set=process_set)
    if op == Average:
        values = values / tf.cast(_divisor(members), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def _check_slices_arguments(op, prescale_factor, postscale_factor):
    # Horovod 0.28's rules for a tf.IndexedSlices, whichever way it travels here.
    if op == Adasum:
        raise NotImplementedError(
            "op=Adasum does not support sparse tensors (tf.IndexedSlices): pass "
            "sparse_as_dense=True to DistributedOptimizer/DistributedGradientTape, or "
            "tf.convert_to_tensor the slices")
    if op not in (Average, Sum):
        raise NotImplementedError("only op=Sum and op=Average apply to a tf.IndexedSlices")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError("prescale_factor/postscale_factor are not supported with a "
                                  "tf.IndexedSlices: scale its values before or after")


def _resolve_op(op, average):
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if op is None:
        op = Average if average is None or average else Sum
    if op not in _SERVER_OPS and op != Adasum:
        raise ValueError(f"unknown reduction op {op!r}: use tf_ps_ops.Average, Sum, Min, Max, "
                         "Product or Adasum")
    return op


# What the servers compute for each op (the PsPushPull attribute reduce_op); Average is a
# sum the worker divides.
_SERVER_OPS = {Average: "sum", Sum: "sum", Min: "min", Max: "max", Product: "product"}


def _scale(tensor, factor):
    if factor == 1.0:
        return tensor
    if tensor.dtype.is_integer:
        # As Horovod does for integers: scale in double precision, then truncate.
        return tf.cast(tf.cast(tensor, tf.float64) * factor, tensor.dtype)
    if tensor.dtype in (tf.float16, tf.bfloat16):
        # As Horovod does on the CPU: scale in float32, round once to the narrow type.
        return tf.cast(tf.cast(tensor, tf.float32) * factor, tensor.dtype)
    return tensor * tf.cast(factor, tensor.dtype)


def _divisor(members=None):
    # Over the workers that took part: every worker, or a process set's members. Under
    # elastic membership the size changes between epochs while a traced function (Keras'
    # train_function) lives on: read it when the graph runs, not when it is traced.
    if members is None and _elastic_epoch.current_epoch_number() >= 0:
        return _library.ops().ps_size()
    return _set_size(members)


def _average(summed, members=None):
    count = _divisor(members)
    if summed.dtype.is_integer:
        return tf.math.floordiv(summed, tf.cast(count, summed.dtype))
    return summed / tf.cast(count, summed.dtype)


@guarded("server", _call_key(
    "allreduce", skip=lambda a: a["op"] == Adasum or isinstance(a["tensor"], tf.IndexedSlices)))
def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False, _variable=None, _priority=0):
    """Sums (op=Sum) or averages (op=Average, the default) `tensor` over all workers.

    Every worker must pass a tensor of the same shape and dtype under the same key;
    otherwise every worker gets an InvalidArgumentError that names the key.
    Averages of integer tensors use floor division. A tf.IndexedSlices (an embedding's
    gradient) is not made dense: as in Horovod, its values and indices are allgathered
    from every worker, with or without a `dense_shape`, so only the touched rows travel.
    The result is a tf.IndexedSlices of every worker's values (divided by the number of
    workers for Average) and indices, in rank order, with the input's `dense_shape`; an
    index that several workers touched appears once per worker, and applying the result
    (scatter-add, Keras optimizers, tf.convert_to_tensor) sums them. `compression` does
    not apply to it. For a dense sum, pass tf.convert_to_tensor(slices), or
    sparse_as_dense=True to DistributedOptimizer/DistributedGradientTape.
    `prescale_factor` multiplies the input before the sum, `postscale_factor` the result
    after averaging. As in Horovod, a tf.IndexedSlices takes only op=Sum or Average and no
    scale factors (NotImplementedError otherwise). `device_sparse` places its gathers.
    `process_set`: reduce over that set's members only (collectives/process_sets.py; a
    worker outside it gets a ValueError); Average divides by the set's size.
    `ignore_name_scope` is accepted for Horovod's signature: keys come from `name` or the
    tensor's name.
    """
    op = _resolve_op(op, average)
    members = _check_process_set(process_set, "allreduce")
    _check_not_xla()
    if isinstance(tensor, tf.IndexedSlices):
        _check_slices_arguments(op, prescale_factor, postscale_factor)
        with tf.device(device_sparse):
            return _allreduce_slices(tensor, op, name, members, process_set)
    with tf.device(device_dense):
        tensor = _dense(tensor)
        if tensor.dtype == tf.bool and op == Average:
            raise ValueError("op=Average of a bool tensor has no meaning: use op=Sum or Max "
                             "(logical or) or op=Min or Product (logical and)")
        key = _set_key(process_set, _key("allreduce", name, tensor))
        if op == Adasum:  # peer to peer: the servers cannot compute it (adasum.py)
            return _scale(adasum_allreduce(_scale(tensor, prescale_factor), key, process_set),
                          postscale_factor)
        sent, ctx = wire_compress(compression, _scale(tensor, prescale_factor))
        handles = [] if _variable is None else [_variable.handle]
        codec, feedback = wire_codec(compression)  # the core codecs run inside the op
        summed = wire_decompress(compression, _library.ops().ps_push_pull(
            sent, handles, tensor_name=key, priority=_priority, compression=codec,
            error_feedback=feedback, reduce_op=_SERVER_OPS[op], process_set=members or []), ctx)
        if op == Average:
            summed = _average(summed, members)
        return _scale(summed, postscale_factor)


def push_pull(tensor, scope="", average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, enable_async=False, name=None):
    """BytePS's name and signature for allreduce: the average over workers (or the sum,
    with average=False or op=Sum). `scope` prefixes the key, as BytePS prefixes the
    tensor's name with it; in a graph without a `name` the key is `scope` + the
    tensor's name."""
    if enable_async:
        raise NotImplementedError(
            "push_pull(enable_async=True) is not supported per call: set the job's "
            "consistency model instead (TFPS_CONSISTENCY=asp or ssp:S, or "
            "init(consistency=...); docs/consistency.md)")
    if scope:
        if name is None and not tf.executing_eagerly():
            name = _key("allreduce", None, _dense(tensor))
        name = scope + (name or eager_key(_EAGER_KEYS["allreduce"], "push_pull"))
    return allreduce(tensor, average, device_dense, device_sparse, compression, op,
                     name=name)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, name=None, process_set=global_process_set):
    """allreduce of each tensor in a list; returns the list of results in the same order."""
    _check_process_set(process_set, "grouped_allreduce")
    eager = tf.executing_eagerly()
    results = []
    for index, tensor in enumerate(tensors):
        key = f"{name}.{index}" if name else (
            eager_key(f"grouped_allreduce.eager.{index}", "grouped_allreduce") if eager else None)
        results.append(allreduce(tensor, average, device_dense, device_sparse, compression, op,
                                 prescale_factor, postscale_factor, name=key,
                                 process_set=process_set))
    return results


def _check_root(root_rank, members=None):
    if not isinstance(root_rank, (int, np.integer)) or not 0 <= root_rank < size():
        raise ValueError(f"root_rank={root_rank!r} is not a rank in 0..{size() - 1}")
    if members is not None and root_rank not in members:
        raise ValueError(f"root_rank={root_rank} is not a member of the process set "
                         f"{members} (root_rank is a global rank, as in Horovod)")


@guarded("server", _call_key("broadcast"))
def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """Returns root_rank's `tensor` on every worker (of `process_set`: root_rank is a
    global rank in it); shapes and dtypes must match."""
    members = _check_process_set(process_set, "broadcast")
    _check_root(root_rank, members)
    _check_not_xla()
    tensor = _dense(tensor)
    key = _set_key(process_set, _key("broadcast", name, tensor))
    return _library.ops().ps_broadcast(tensor, tensor_name=key, root_rank=int(root_rank),
                                       process_set=members or [])


@guarded("peer", _call_key("allgather"))
def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates every worker's `tensor` along the first dimension, in rank order.

    First dimensions may differ between workers; the dtype and the other dimensions must
    match (InvalidArgumentError naming the tensor otherwise). Workers exchange their
    tensors directly, peer to peer (PsAllgather): no server in the path. Within a process
    set other than the global one, the gather goes through the servers instead
    (tf_ps_ops/collectives/set_collectives.py): the set's members only, each receiving the result.
    """
    members = _check_process_set(process_set, "allgather")
    _check_not_xla()
    tensor = tf.convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        raise ValueError("allgather needs a tensor with at least one dimension, got a scalar")
    key = _set_key(process_set, _key("allgather", name, tensor))
    return raw.allgather(tensor, key, members)


@tf.RegisterGradient("PsPushPull")
def _push_pull_grad(op, grad):
    # d(sum over workers of x_w)/dx_w: every worker's upstream gradient, summed. For
    # op=Min/Max/Product, as Horovod 0.28 does (its gradient reduces the upstream gradient
    # with the op of the forward call): the min/max/product of the upstream gradients.
    reduce_op = tf.compat.as_str(op.get_attr("reduce_op"))
    key = tf.compat.as_str(op.get_attr("tensor_name")) + ".grad"
    members = list(op.get_attr("process_set"))  # the same workers, backwards
    return [_library.ops().ps_push_pull(_dense(grad), [], tensor_name=key,
                                        reduce_op=reduce_op, process_set=members)] + \
        [None] * (len(op.inputs) - 1)


@tf.RegisterGradient("PsBroadcast")
def _broadcast_grad(op, grad):
    # Only the root's input reaches the output, so only the root gets a gradient: the
    # average of every worker's upstream gradient (Horovod 0.28). Every worker still
    # pushes: the root's average needs them all.
    key = tf.compat.as_str(op.get_attr("tensor_name")) + ".grad"
    members = list(op.get_attr("process_set")) or None
    reduced = _average(_library.ops().ps_push_pull(_dense(grad), [], tensor_name=key,
                                                   process_set=members or []), members)
    if rank() == op.get_attr("root_rank"):
        return reduced
    with tf.control_dependencies([reduced]):
        return tf.zeros_like(reduced)


@tf.RegisterGradient("PsAllgather")
def _allgather_grad(op, grad):
    # As Horovod 0.28: the upstream gradient averaged over workers, then this worker's
    # rows of it. Workers may contribute different numbers of rows, so they tell each
    # other how many.
    key = tf.compat.as_str(op.get_attr("tensor_name")) + ".grad"
    reduced = _average(_library.ops().ps_push_pull(_dense(grad), [], tensor_name=key))
    rows = tf.shape(op.inputs[0], out_type=tf.int64)[:1]
    all_rows = _library.ops().ps_allgather(rows, tensor_name=key + ".rows")
    start = tf.reduce_sum(all_rows[:rank()])
    return reduced[start:start + rows[0]]

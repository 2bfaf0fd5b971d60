"""PS mode's graph rewrite: ResourceApplyXXX ops become PsApplyXXX ops.

    tf_ps_ops.init()
    tf_ps_ops.enable_graph_rewrite()
    tf_ps_ops.ps_mode.initialize_variables(variables)   # before the first forward pass
    ... train with tf.compat.v1.train / tf_keras legacy optimizers as usual ...

From `enable_graph_rewrite()` on (or with TFPS_GRAPH_REWRITE=1 at `init()`), code that
creates TensorFlow's dense or sparse update ops gets ours instead: tf.compat.v1.train optimizers
(graph, tf.function and eager), tf_keras legacy optimizers (they call `tf.raw_ops`) and
direct `tf.raw_ops` calls. `rewrite_graph_def` swaps the nodes of an existing GraphDef.

Each PsApplyXXX op has its TF twin's inputs and attrs plus `tensor_name`, the key on the
servers, which must be identical on every worker. It comes from the variable: its graph
name where there is a graph; for an eager variable, the name it had when
`initialize_variables` (or `push_variables`) named it, with a per-name ordinal, so two
variables both called "Variable" get different keys in the order they were named. A
handle no call named gets "variable#n" in the order first seen, with a warning.

The swap table and the key prefix live in the op library (kernels/ps_op_table.cc); the
Grappler rewrite there swaps by the same table.
"""

import functools
import inspect
import logging
import sys
import threading
import weakref

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops
from tensorflow.python.ops import gen_training_ops

from tf_ps_ops.collectives import objects as _objects
from tf_ps_ops.common import library as _library
from tf_ps_ops.common.library import ops as _ops

_log = logging.getLogger("tf_ps_ops")


@functools.cache
def swaps():
    """TensorFlow op -> our op, from the op library's table (kernels/ps_op_table.cc).

    Ops missing here (ref-variable ApplyXXX, ProximalXXX, Ftrl, ...) are left alone and
    logged once when first created. The sparse ops send only the rows in `indices`
    (docs/ps_mode.md, "Sparse updates").
    """
    text = _library.c_api().tfps_ps_swap_table().decode()
    return dict(line.split() for line in text.splitlines())


@functools.cache
def _key_prefix():
    return _library.c_api().tfps_ps_key_prefix().decode()


def ps_key(name):
    """The servers' key of a parameter called `name` ("ps:" + name)."""
    return _key_prefix() + name


# Update ops we see but cannot swap, to say so once.
_UNSWAPPED = ("ApplyGradientDescent", "ApplyMomentum", "ApplyAdam", "ApplyAdagrad",
              "ApplyRMSProp", "ResourceSparseApplyFtrl", "ResourceApplyFtrl", "ResourceApplyAdadelta", "ResourceApplyProximalAdagrad")

_lock = threading.Lock()
_originals = {}  # (module, attribute) -> original, while the rewrite is on
_names = {}  # handle.ref() -> key
_name_counts = {}
_warned = set()
_served = []  # (reference to a variable, its key): what the servers were given, in order
_served_keys = set()


def _python_name(module, op_type):
    """The Python function name TF's code generator gave `op_type` in `module`
    ("ResourceApplyRMSProp" -> "resource_apply_rms_prop"), found rather than re-derived."""
    wanted = op_type.lower()
    for name in dir(module):
        if name.replace("_", "") == wanted:
            return name
    return None


def _raw_ops_modules():
    names = ("tensorflow._api.v2.raw_ops", "tensorflow._api.v2.compat.v1.raw_ops",
             "tensorflow._api.v2.compat.v2.raw_ops")
    return [sys.modules[n] for n in names if n in sys.modules] + [tf.raw_ops]


def _next_key(base):
    count = _name_counts.get(base, 0)
    _name_counts[base] = count + 1
    return ps_key(base + (f"#{count}" if count else ""))


def _graph_key(handle):
    """The key of a graph handle (its VarHandleOp's name, or the captured outside
    variable's key), or None for an eager handle."""
    graph = getattr(handle, "graph", None)
    if graph is None or isinstance(handle, tf_ops.EagerTensor):
        return None
    for external, internal in getattr(graph, "captures", ()):
        if internal is handle:  # a tf.function capture: name the outside variable
            return key_for(external)
    if getattr(handle.op, "type", "") in ("VarHandleOp", "VariableV2"):
        return ps_key(handle.op.name)
    return None


def _name_variable(variable):
    """Gives an eager variable its key from its name, once (see the module doc)."""
    handle = getattr(variable, "handle", variable)
    if _graph_key(handle) is not None or not hasattr(variable, "name"):
        return
    with _lock:
        if handle.ref() not in _names:
            _names[handle.ref()] = _next_key(variable.name.split(":")[0])


def key_for(handle):
    """The server key of the variable behind a resource handle (see the module doc)."""
    key = _graph_key(handle)
    if key is not None:
        return key
    with _lock:
        ref = handle.ref()
        if ref not in _names:
            _log.warning("tf_ps_ops: no name for a variable's PS key; using the order first "
                         "seen. Call ps_mode.initialize_variables first, or pass tensor_name=, "
                         "to keep keys stable across workers.")
            _names[ref] = _next_key("variable")
        return _names[ref]


def _wrap(ps_function, original):
    signature = inspect.signature(original)

    def apply(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        arguments = dict(bound.arguments)
        arguments.setdefault("tensor_name", key_for(arguments["var"]))
        return ps_function(**arguments)

    apply.__wrapped__ = original
    return apply


def _warn_once(op_type, original):
    def create(*args, **kwargs):
        if op_type not in _warned:
            _warned.add(op_type)
            _log.warning("tf_ps_ops: %s has no PS-mode version; it stays a local update", op_type)
        return original(*args, **kwargs)

    create.__wrapped__ = original
    return create


def _patch(module, attribute, replacement):
    if (module, attribute) not in _originals:
        _originals[(module, attribute)] = getattr(module, attribute)
    setattr(module, attribute, replacement)


def _remember(variable, key):
    """Records that the servers hold `variable` under `key` (eager variables only), so
    that push_served_variables can give a fresh set of servers (an elastic epoch) the
    same parameters. Weak references: a variable the program dropped is not pushed."""
    if not tf.executing_eagerly():
        return
    try:
        ref = weakref.ref(variable)
    except TypeError:
        ref = lambda: variable  # noqa: E731
    with _lock:
        if key not in _served_keys:
            _served_keys.add(key)
            _served.append((ref, key))


def push_served_variables():
    """Pushes every variable the servers were given so far (by initialize_variables,
    push_variables or a `tf_ps_ops.optimizers` build), in the order first given, with
    rank 0's values overwriting the servers' (as push_variables). A collective: every
    worker calls it at the same point. tf_ps_ops.elastic calls it after each
    re-initialisation, whose new servers hold nothing (docs/elastic.md); the servers reset
    the optimizer slots. Returns the number of variables pushed."""
    live = _live_served()
    if live:
        push_variables([v for v, _ in live], names=[k for _, k in live])
    return len(live)


def _live_served():
    with _lock:
        live = [(ref(), key) for ref, key in _served]
    return [(variable, key) for variable, key in live if variable is not None]


_scratch = {}  # key -> a variable of its shape, the buffer of slot reads and writes


def _scratch_for(variable, key):
    shape, dtype = tuple(variable.shape), tf.as_dtype(variable.dtype)
    held = _scratch.get(key)
    if held is None or tuple(held.shape) != shape or held.dtype != dtype:
        held = _scratch[key] = tf.Variable(tf.zeros(shape, dtype), trainable=False)
    return held


def read_served_slots():
    """The servers' optimizer slots of every variable they were given (as
    push_served_variables): {key: [codes, slot 0, slot 1, ...]}, NumPy arrays of the
    variable's shape; `codes` holds the server optimizer's code per element (0 where a
    partition was never updated: it has no slots yet). A collective: every worker calls it
    at the same point and gets the same arrays. tf_ps_ops.elastic reads them at each
    commit, so that a membership change keeps them (push_served_slots)."""
    library, slot_count = _ops(), _library.c_api().tfps_ps_optimizer_slots
    slots = {}
    for variable, key in _live_served():
        scratch = _scratch_for(variable, key)
        library.ps_init_variable(scratch.handle, tensor_name=key, slot=-1)
        arrays = [scratch.numpy()]
        count = max((slot_count(int(code)) for code in np.unique(arrays[0]).tolist()),
                    default=0)
        for k in range(count):
            library.ps_init_variable(scratch.handle, tensor_name=key, slot=k)
            arrays.append(scratch.numpy())
        slots[key] = arrays
    return slots


def push_served_slots(slots):
    """Gives the servers the optimizer slots read by read_served_slots (rank 0's `slots`
    win; the other workers' may be None), after push_served_variables pushed the values.
    A collective. Returns the number of variables whose optimizer state was pushed."""
    layout = [(key, len(arrays)) for key, arrays in (slots or {}).items()]
    layout = _objects.broadcast_object(layout, root_rank=0,
                                          name="tfps.ps_mode.push_served_slots")
    variables = {key: variable for variable, key in _live_served()}
    library = _ops()
    pushed = 0
    for key, count in layout:
        if key not in variables:
            raise RuntimeError(f"rank 0 holds optimizer slots of PS parameter {key!r}, which "
                               "this worker never gave the servers: every worker must build "
                               "the same model and optimizer")
        scratch = _scratch_for(variables[key], key)
        mine = (slots or {}).get(key)
        for k in range(-1, count - 1):  # the optimizer's code first: it makes the slots
            scratch.assign(mine[k + 1] if mine is not None and len(mine) == count
                           else tf.zeros_like(scratch))
            library.ps_init_variable(scratch.handle, tensor_name=key, overwrite=True, slot=k)
        pushed += count > 0
    return pushed


def _deferred_to_elastic_run():
    """A worker that joined an elastic job late (a newcomer) does not init its variables
    on the servers by itself (a collective the members are not in): elastic.run's first
    call pushes them, while the members push theirs at the same point (docs/elastic.md)."""
    from tf_ps_ops.common import elastic_epoch as _elastic_epoch
    return tf.executing_eagerly() and _elastic_epoch.joined_late()


def initialize_variables(variables, names=None):
    """Makes every worker start PS-mode training from rank 0's values of `variables`.

    Rank 0's values go to the servers (unless they hold them already) and every rank
    adopts the servers' values. Run it once after the variables are initialised and before
    the first forward pass: a gradient computed on a rank's own initial weights would not
    be the one single-process training computes. Eager: runs now; graph: returns the op.
    `names` overrides the keys (default: as the rewritten update ops name them).
    """
    library = _ops()
    created = []
    deferred = _deferred_to_elastic_run()
    for i, variable in enumerate(variables):
        handle = getattr(variable, "handle", variable)
        _name_variable(variable)
        name = names[i] if names is not None else key_for(handle)
        _remember(variable, name)
        if not deferred:
            created.append(library.ps_init_variable(handle, tensor_name=name))
    if tf.executing_eagerly():
        return None
    return tf.group(*created, name="ps_initialize_variables")


def _is_keras_variable(variable):
    keras = sys.modules.get("keras")
    return keras is not None and isinstance(variable, keras.Variable)


def push_variables(variables, names=None):
    """Overwrites the servers' parameters with rank 0's values of `variables`: a restore.

    After `model.load_weights(...)` / `tf.train.Checkpoint.restore(...)` in PS mode the
    servers still hold the values of the step before; every worker calls this (it is a
    collective, like a training step) so that the next step continues from the restored
    values on every replica. Rank 0's values replace the servers' and every rank adopts
    them. The servers reset the optimizer slots (momentum, Adam's m and v, ...) of these
    parameters: the next update creates them afresh, as a new optimizer would; the slots
    the servers held belong to the trajectory being replaced. Keys: Keras 3 variables use
    `ps_key(variable.path)` (as `tf_ps_ops.optimizers` do), others `key_for` (as the
    rewritten update ops do); `names` overrides them. Eager: runs now; graph: returns the op.
    """
    library = _ops()
    created = []
    for i, variable in enumerate(variables):
        if _is_keras_variable(variable):
            handle, name = variable.value.handle, ps_key(variable.path)
        else:
            handle = getattr(variable, "handle", variable)
            _name_variable(variable)
            name = key_for(handle)
        if names is not None:
            name = names[i]
        _remember(variable, name)
        created.append(library.ps_init_variable(handle, tensor_name=name, overwrite=True))
    if tf.executing_eagerly():
        return None
    return tf.group(*created, name="ps_push_variables")


def enable_graph_rewrite():
    """Swaps TF's dense update ops for PS-mode ops from now on (see the module doc)."""
    library = _ops()
    modules = [gen_training_ops]  # v1 and tf_keras optimizers look functions up here
    with _lock:
        for tf_op, ps_op in swaps().items():
            ps_function = getattr(library, _python_name(library, ps_op))
            python_name = _python_name(gen_training_ops, tf_op)
            for module in modules:
                original = _originals.get((module, python_name), getattr(module, python_name))
                _patch(module, python_name, _wrap(ps_function, original))
            for module in _raw_ops_modules():
                original = _originals.get((module, tf_op), getattr(module, tf_op))
                _patch(module, tf_op, _wrap(ps_function, original))
        for tf_op in _UNSWAPPED:
            for module in modules:
                name = _python_name(module, tf_op)
                if name is not None:
                    original = _originals.get((module, name), getattr(module, name))
                    _patch(module, name, _warn_once(tf_op, original))


def disable_graph_rewrite():
    """Restores TensorFlow's own update ops for code that creates ops from now on."""
    with _lock:
        for (module, attribute), original in _originals.items():
            setattr(module, attribute, original)
        _originals.clear()


def graph_rewrite_enabled():
    return bool(_originals)


def rewrite_graph_def(graph_def):
    """Returns a copy of `graph_def` with every swappable update node made a PS-mode node.

    The key of each is the name of the node feeding its `var` input (a VarHandleOp: the
    same name on every worker). Functions in the graph's library are rewritten too, as the
    Grappler rewrite (TfpsPsRewrite) does. Load the op library (this call does) before
    importing the result.
    """
    _ops()
    table = swaps()
    result = tf.compat.v1.GraphDef()
    result.CopyFrom(graph_def)
    node_lists = [result.node] + [f.node_def for f in result.library.function]
    for nodes in node_lists:
        for node in nodes:
            if node.op not in table or not node.input:
                if node.op in _UNSWAPPED and node.op not in _warned:
                    _warned.add(node.op)
                    _log.warning("tf_ps_ops: %s has no PS-mode version; left alone", node.op)
                continue
            node.op = table[node.op]
            source = node.input[0].lstrip("^").split(":")[0]
            node.attr["tensor_name"].s = ps_key(source).encode()
    return result

"""Variables and Python objects between workers: broadcast_variables and broadcast_ (a
variable's value from one rank to every worker), broadcast_object, broadcast_object_fn and
allgather_object (any cloudpickle-able object, pickled into a uint8 tensor and sent through
broadcast or allgather), and keys_for, the stable keys these and the optimizers give a
list of variables.
"""

import cloudpickle
import numpy as np
import tensorflow as tf

from tf_ps_ops.collectives.ops import _check_process_set, _check_root, allgather, broadcast
from tf_ps_ops.collectives.process_sets import global_process_set
from tf_ps_ops.common.basics import rank


def keys_for(objects, prefix):
    """Stable, distinct keys `prefix.<name>` for variables or graph tensors.

    Keras 3 variables use `path` (their `name` is only the last component), tf.Variables
    and graph tensors their `name`; eager tensors have none and use their position.
    Repeated names get a `#n` suffix so that no two objects share a key.
    """
    keys, seen = [], {}
    for index, obj in enumerate(objects):
        path = getattr(obj, "path", None)
        if isinstance(path, str):
            label = path
        elif isinstance(obj, tf.Variable) or not tf.executing_eagerly():
            label = obj.name
        else:
            label = f"source{index}"
        base = f"{prefix}.{label}"
        seen[base] = seen.get(base, 0) + 1
        keys.append(base if seen[base] == 1 else f"{base}#{seen[base] - 1}")
    return keys


def _assign_broadcast(variables, root_rank, prefix, process_set=global_process_set):
    _check_root(root_rank)
    variables = list(variables) if isinstance(variables, (list, tuple)) else [variables]
    keys = keys_for(variables, prefix)
    return variables, [var.assign(broadcast(var, root_rank, name=key, process_set=process_set))
                       for var, key in zip(variables, keys)]


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Assigns root_rank's values to `variables` on every worker.

    Returns a grouped op in graph mode and None eagerly, as Horovod does. The
    assignment is always in place, so Horovod's `inplace` changes nothing.
    """
    _check_process_set(process_set, "broadcast_variables")
    _, assignments = _assign_broadcast(variables, root_rank, "broadcast_variables", process_set)
    return tf.group(*assignments)


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast of a variable or list of variables.

    Eagerly and in tf.function, returns the variables (assigned by then). In a v1 graph,
    returns their values read after the assignments, as Horovod does: running them in a
    Session runs the broadcast.
    """
    _check_process_set(process_set, "broadcast_")
    variables, assignments = _assign_broadcast(variables, root_rank, name or "broadcast_",
                                               process_set)
    if tf.executing_eagerly() or tf.inside_function():
        return variables
    with tf.control_dependencies(assignments):
        return [tf.identity(var.read_value()) for var in variables]


def _session_runner(what, session):
    """Returns run(tensor) -> NumPy value: eagerly, or in a v1 graph through `session`
    (default: the default session), as Horovod's `session=` arguments do."""
    if tf.executing_eagerly():
        return lambda tensor: tensor.numpy()
    if tf.inside_function():
        raise RuntimeError(f"{what} pickles Python objects and must run eagerly or in a v1 "
                           "graph with a Session, not inside tf.function")
    session = session or tf.compat.v1.get_default_session()
    if session is None:
        raise RuntimeError(f"{what} in a v1 graph needs a Session: pass session= or run it "
                           "under `with session.as_default():`")
    return session.run


def broadcast_object(obj, root_rank=0, session=None, name=None,
                     process_set=global_process_set):
    """Returns root_rank's `obj` (any cloudpickle-able object) on every worker.

    Runs eagerly, or in a v1 graph through `session` (default: the default session).
    """
    members = _check_process_set(process_set, "broadcast_object")
    run = _session_runner("broadcast_object", session)
    _check_root(root_rank, members)
    key = name or "broadcast_object"
    payload = b""
    if rank() == root_rank:
        payload = cloudpickle.dumps(obj)
    length = run(broadcast(tf.constant([len(payload)], tf.int64), root_rank, name=key + ".size",
                           process_set=process_set))
    if rank() != root_rank:
        payload = bytes(int(length[0]))
    data = run(broadcast(tf.constant(np.frombuffer(payload, np.uint8)), root_rank,
                         name=key + ".data", process_set=process_set))
    return cloudpickle.loads(data.tobytes())


def broadcast_object_fn(root_rank=0, session=None, name=None,
                        process_set=global_process_set):
    """v1 graph mode: builds the broadcast ops once and returns `fn(obj)` that runs them
    in `session` (default: the default session) for each object, as Horovod's does."""
    _check_root(root_rank, _check_process_set(process_set, "broadcast_object_fn"))
    key = name or "broadcast_object_fn"
    size_in = tf.compat.v1.placeholder(tf.int64, [1], name="bcast_object_size")
    data_in = tf.compat.v1.placeholder(tf.uint8, [None], name="bcast_object_data")
    size_out = broadcast(size_in, root_rank, name=key + ".size", process_set=process_set)
    data_out = broadcast(data_in, root_rank, name=key + ".data", process_set=process_set)
    session = session or tf.compat.v1.get_default_session()

    def broadcast_fn(obj):
        payload = cloudpickle.dumps(obj) if rank() == root_rank else b""
        length = session.run(size_out, {size_in: [len(payload)]})
        if rank() != root_rank:
            payload = bytes(int(length[0]))
        data = session.run(data_out, {data_in: np.frombuffer(payload, np.uint8)})
        return cloudpickle.loads(data.tobytes())

    return broadcast_fn


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Returns the list of every worker's `obj`, in rank order.

    Runs eagerly, or in a v1 graph through `session` (default: the default session).
    """
    _check_process_set(process_set, "allgather_object")
    run = _session_runner("allgather_object", session)
    key = name or "allgather_object"
    payload = np.frombuffer(cloudpickle.dumps(obj), np.uint8)
    lengths = run(allgather(tf.constant([payload.size], tf.int64), name=key + ".sizes",
                            process_set=process_set))
    data = run(allgather(tf.constant(payload), name=key + ".data", process_set=process_set))
    chunks = np.split(data, np.cumsum(lengths)[:-1])
    return [cloudpickle.loads(chunk.tobytes()) for chunk in chunks]

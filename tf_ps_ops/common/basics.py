"""This worker's place in the cluster (Horovod's basics): rank, size and the rest, and
shutdown. Joining is init() in common/init.py, which sits above this module: it also
registers process sets and turns on PS mode, which themselves ask this module for ranks.
"""

import logging
import sys

import tensorflow as tf

from tf_ps_ops.common import library as _library

# The validated environment of the last successful init() (init.py sets it):
# local_rank/local_size may be overridden there. The engine's own state lives in C++; this
# is only the Python view.
_cluster = None


def shutdown():
    """Says goodbye to the servers and stops the engine. Safe to call more than once."""
    global _cluster
    lib = _library.c_api()
    if lib.tfps_is_initialized():
        lib.tfps_shutdown()
    _cluster = None


def is_initialized():
    """True between a successful init() and shutdown()."""
    return bool(_library.c_api().tfps_is_initialized())


def _initialized_api():
    lib = _library.c_api()
    if not lib.tfps_is_initialized():
        raise ValueError("tf_ps_ops has not been initialized; use tf_ps_ops.init().")
    return lib


def rank():
    """This worker's rank, 0 <= rank < size()."""
    return _initialized_api().tfps_rank()


def size():
    """The number of workers."""
    return _initialized_api().tfps_size()


def local_rank():
    """This worker's rank among the workers on its host.

    The scheduler derives it from the workers' hosts; TFPS_LOCAL_RANK (or
    HOROVOD_LOCAL_RANK) overrides it when the launcher knows better.
    """
    lib = _initialized_api()
    if _cluster is not None and _cluster.local_rank is not None:
        return _cluster.local_rank
    return lib.tfps_local_rank()


def local_size():
    """The number of workers on this worker's host (TFPS_LOCAL_SIZE overrides it)."""
    lib = _initialized_api()
    if _cluster is not None and _cluster.local_size is not None:
        return _cluster.local_size
    return lib.tfps_local_size()


def num_servers():
    """The number of parameter servers the keys are sharded across."""
    return _initialized_api().tfps_num_servers()


def rank_op(name=None):
    """An int32 scalar op that evaluates to rank() when run (fails before init)."""
    return _library.ops().ps_rank(name=name)


def size_op(name=None):
    """An int32 scalar op that evaluates to size() when run."""
    return _library.ops().ps_size(name=name)


def local_rank_op(name=None):
    """An int32 scalar op that evaluates to local_rank() when run."""
    if _cluster is not None and _cluster.local_rank is not None:
        # The override exists only in Python, so the op must carry it as a constant.
        return tf.constant(_cluster.local_rank, tf.int32, name=name)
    return _library.ops().ps_local_rank(name=name)


def local_size_op(name=None):
    """An int32 scalar op that evaluates to local_size() when run."""
    if _cluster is not None and _cluster.local_size is not None:
        return tf.constant(_cluster.local_size, tf.int32, name=name)
    return _library.ops().ps_local_size(name=name)


def log_on_rank0(logger, text):
    """`text` on rank 0 only (on every process before init()): to `logger` at INFO when
    logging is configured, else to stderr, so that it is seen as TensorFlow's own logs
    are (the plan's table, a layer decision, a cost worth knowing)."""
    if is_initialized() and rank() != 0:
        return
    if logger.handlers or logging.getLogger().handlers:
        logger.info("%s", text)
    else:
        print(text, file=sys.stderr, flush=True)

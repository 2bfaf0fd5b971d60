"""Joining the cluster and asking for this worker's place in it (Horovod's basics)."""

import atexit
import ctypes
import os
import sys

import tensorflow as tf

from tf_ps_ops import _config
from tf_ps_ops import _elastic_epoch
from tf_ps_ops import _library
from tf_ps_ops._config import check_consistency  # noqa: F401 (part of this module's surface)

# The validated environment of the last successful init(): local_rank/local_size may be
# overridden there. The engine's own state lives in C++; this is only the Python view.
_cluster = None
_atexit_registered = False


def init(comm=None, consistency=None, elastic=None, process_sets=None):
    """Joins the cluster described by the environment (see docs/env.md).

    Blocks until the scheduler has seen every worker and server, or TFPS_TIMEOUT passes.
    Calling it again once initialised does nothing, as in Horovod.

    Args:
      comm: accepted for Horovod signature compatibility; must be None, since the
        cluster comes from the environment, not from an MPI communicator.
      consistency: the job's consistency model, "bsp", "ssp:S" or "asp"
        (docs/consistency.md); None: TFPS_CONSISTENCY, or bsp. Every worker must pass the
        same (the rendezvous refuses a worker that differs).
      elastic: True: elastic membership (docs/elastic.md), as TFPS_ELASTIC=1; the rank,
        size and scheduler then come from the elastic driver (`tfps-run --elastic`).
      process_sets: Horovod's static process sets (ProcessSet objects or lists of ranks),
        registered in this order on every worker (tf_ps_ops/process_sets.py); every
        worker must pass the same (ValueError on every worker otherwise).
    """
    global _cluster, _atexit_registered
    if comm is not None:
        raise NotImplementedError(
            "tf_ps_ops.init() takes its cluster from the environment (tfps-run, TFPS_* or "
            "DMLC_* variables), not from an MPI communicator")
    lib = _library.c_api()
    if lib.tfps_is_initialized():
        return
    if consistency is not None:
        # The core reads its knobs from the environment at init, so the argument goes there.
        os.environ["TFPS_CONSISTENCY"] = _config.check_consistency(consistency)
    if elastic:
        os.environ["TFPS_ELASTIC"] = "1"
    epoch = None
    if _elastic_epoch.enabled():
        epoch = _elastic_place()
    cluster = _config.read_cluster()
    error = ctypes.create_string_buffer(4096)
    status = lib.tfps_init(cluster.scheduler_host.encode(), cluster.scheduler_port,
                           cluster.rank, cluster.size, cluster.num_servers,
                           error, len(error))
    while status != 0 and epoch is not None and _elastic_epoch.superseded(epoch, 5.0):
        # A member died during this epoch's rendezvous: the driver published the next
        # epoch and stopped this one's scheduler, which refused us (docs/elastic.md).
        print(f"tf_ps_ops.elastic: the rendezvous of epoch {epoch} was abandoned "
              f"({(error.value.decode(errors='replace').splitlines() or [''])[0][:300]}); "
              "joining the next", file=sys.stderr, flush=True)
        epoch = _elastic_place(after=epoch)
        cluster = _config.read_cluster()
        status = lib.tfps_init(cluster.scheduler_host.encode(), cluster.scheduler_port,
                               cluster.rank, cluster.size, cluster.num_servers,
                               error, len(error))
    if status != 0:
        raise RuntimeError(
            f"tf_ps_ops.init() failed for worker {cluster.rank} of {cluster.size} "
            f"(scheduler {cluster.scheduler_host}:{cluster.scheduler_port}): "
            f"{error.value.decode(errors='replace')}")
    _cluster = cluster
    if epoch is not None:
        _elastic_epoch.joined(epoch)
    rewrite, source = _config.lookup("TFPS_GRAPH_REWRITE")
    if rewrite not in (0, 1):
        raise ValueError(f"{source}={rewrite}: expected 0 or 1")
    if rewrite:
        from tf_ps_ops import ps_mode
        ps_mode.enable_graph_rewrite()
    if not _atexit_registered:
        # Servers exit once every worker said goodbye; Horovod scripts never call
        # shutdown() themselves, so say it for them.
        atexit.register(shutdown)
        _atexit_registered = True
    if process_sets:
        from tf_ps_ops import process_sets as _process_sets
        _process_sets.register_at_init(process_sets)


def _elastic_place(after=None):
    """Under elastic membership: waits for this worker's place in the driver's next epoch
    and puts it where read_cluster() looks. Returns the epoch number."""
    try:  # the core validates TFPS_TIMEOUT itself in tfps_init; here only a bound
        timeout = min(float(os.environ.get("TFPS_TIMEOUT", "120")), 3600.0)
    except ValueError:
        timeout = 120.0
    epoch, rank, size, scheduler, num_servers = _elastic_epoch.wait_for_place(timeout, after)
    os.environ.update({"TFPS_RANK": str(rank), "TFPS_SIZE": str(size),
                       "TFPS_SCHEDULER": scheduler, "TFPS_NUM_SERVERS": str(num_servers)})
    for name in ("TFPS_LOCAL_RANK", "TFPS_LOCAL_SIZE"):
        os.environ.pop(name, None)  # the scheduler derives them for this epoch
    return epoch


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

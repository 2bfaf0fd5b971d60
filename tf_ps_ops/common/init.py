"""init(): joins the cluster, then sets up what the job asked for (PS mode's graph
rewrite, static process sets).

An orchestrator above the modules it sets up: process sets and PS mode ask basics.py for
ranks and never import this module, so the imports stay one way (docs/internals.md). Their
modules are imported here only when the job uses them, as before the split.
"""

import atexit
import ctypes
import os
import sys

from tf_ps_ops.common import basics
from tf_ps_ops.common import config as _config
from tf_ps_ops.common import elastic_epoch as _elastic_epoch
from tf_ps_ops.common import library as _library

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
        registered in this order on every worker (tf_ps_ops/collectives/process_sets.py); every
        worker must pass the same (ValueError on every worker otherwise).
    """
    global _atexit_registered
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
    basics._cluster = cluster
    if epoch is not None:
        _elastic_epoch.joined(epoch)
    rewrite, source = _config.lookup("TFPS_GRAPH_REWRITE")
    if rewrite not in (0, 1):
        raise ValueError(f"{source}={rewrite}: expected 0 or 1")
    if rewrite:
        from tf_ps_ops.ps import ps_mode
        ps_mode.enable_graph_rewrite()
    if not _atexit_registered:
        # Servers exit once every worker said goodbye; Horovod scripts never call
        # shutdown() themselves, so say it for them.
        atexit.register(basics.shutdown)
        _atexit_registered = True
    if process_sets:
        from tf_ps_ops.collectives import register
        register.register_at_init(process_sets)


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

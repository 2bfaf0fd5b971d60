"""Horovod API names beyond the collectives: topology and build queries, global-variable
broadcast for v1 graphs, and the names we do not serve (each raises NotImplementedError
saying why, so code written for Horovod fails at the call with a reason, not with an
AttributeError at import).
"""

import json

import tensorflow as tf

from tf_ps_ops.collectives.objects import broadcast_variables
from tf_ps_ops.common import library as _library
from tf_ps_ops.common.basics import local_rank, local_size, rank, size


def cross_size():
    """The number of hosts (Horovod: workers sharing this worker's local_rank).

    Assumes what tfps-run and Horovod's launchers produce: every host runs local_size()
    workers with consecutive ranks.
    """
    return size() // local_size()


def cross_rank():
    """This worker's host index, 0 <= cross_rank() < cross_size() (same layout as
    cross_size assumes)."""
    return rank() // local_size()


def is_homogeneous():
    """True when every host runs the same number of workers (as cross_rank assumes)."""
    return size() % local_size() == 0


def _built_with(feature):
    try:
        with open(_library.BUILD_INFO_PATH) as info:
            return bool(json.load(info).get(feature, False))
    except (OSError, ValueError):
        return False


# Horovod's build queries. The transport here is our own (ZeroMQ to the servers and
# peers): none of MPI, Gloo, DDL or oneCCL is built in or used.
def mpi_built():
    return False


def mpi_enabled():
    return False


def mpi_threads_supported():
    return False


def gloo_built():
    return False


def gloo_enabled():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def nccl_built():
    """Horovod returns NCCL's version number, or 0 when NCCL is not built in."""
    return int(_built_with("nccl"))


def cuda_built():
    return _built_with("cuda")


def rocm_built():
    return False


def broadcast_global_variables(root_rank):
    """v1 graphs: an op that assigns root_rank's values to every global variable.

    Eagerly, as in Horovod, a RuntimeError: there is no global-variable collection;
    broadcast the model's and optimizer's variables with broadcast_variables instead.
    """
    if tf.executing_eagerly():
        raise RuntimeError(
            "broadcast_global_variables() does not support eager execution: use "
            "broadcast_variables(model.variables + optimizer.variables, root_rank)")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """v1 MonitoredSession hook: broadcasts the global variables from root_rank once the
    session exists (Horovod's hook for tf.estimator / MonitoredTrainingSession)."""

    def __init__(self, root_rank, device=""):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.bcast_op = None

    def begin(self):
        graph = tf.compat.v1.get_default_graph()
        if self.bcast_op is None or self.bcast_op.graph is not graph:
            with tf.device(self.device):
                self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)


# Horovod name -> why it is not served. Empty since issue 12's third slice: every name of
# horovod.tensorflow and horovod.tensorflow.keras is served; the mechanism stays for the
# names a later Horovod adds.
UNSERVED = {
}


class _Unserved:
    """Stands for a Horovod name we do not serve: calling it, or any of its attributes,
    raises NotImplementedError with the reason. Falsy, so feature checks fail soft."""

    def __init__(self, name, reason):
        self._name, self._reason = name, reason

    def _raise(self, *args, **kwargs):
        raise NotImplementedError(f"tf_ps_ops does not serve Horovod's {self._name}: "
                                  f"{self._reason}")

    __call__ = _raise

    def __getattr__(self, attribute):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _Unserved(f"{self._name}.{attribute}", self._reason)

    def __bool__(self):
        return False

    def __repr__(self):
        return f"<not served: {self._name}>"


def unserved(name):
    """The stand-in for Horovod name `name` (a key of UNSERVED)."""
    return _Unserved(name, UNSERVED[name])

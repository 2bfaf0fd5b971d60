"""Horovod's `horovod.tensorflow` module, name for name:

    import tf_ps_ops.tensorflow as hvd          # for `import horovod.tensorflow as hvd`
    import tf_ps_ops.keras as hvd               # for `import horovod.tensorflow.keras as hvd`

Horovod names we do not serve are present and raise NotImplementedError with the reason
when called (see tf_ps_ops.collectives.compat.UNSERVED). The top-level `tf_ps_ops` package serves
the same API and BytePS's; this module only fixes Horovod's layout (`hvd.keras`,
`hvd.util`, `hvd.elastic`, ...).
"""

import sys

import tensorflow as _tf

from tf_ps_ops import callbacks, elastic, keras  # noqa: F401  (hvd.keras, as in Horovod)
from tf_ps_ops.collectives.alltoall import (  # noqa: F401
    alltoall, grouped_allgather, grouped_reducescatter, reducescatter)
from tf_ps_ops.collectives.compat import (  # noqa: F401
    BroadcastGlobalVariablesHook, broadcast_global_variables, ccl_built, cross_rank,
    cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, is_homogeneous, mpi_built,
    mpi_enabled, mpi_threads_supported, nccl_built, rocm_built, UNSERVED, unserved)
from tf_ps_ops.collectives.compression import Compression  # noqa: F401
from tf_ps_ops.collectives.join import barrier, join  # noqa: F401
from tf_ps_ops.collectives.objects import (  # noqa: F401
    allgather_object, broadcast_, broadcast_object, broadcast_object_fn, broadcast_variables)
from tf_ps_ops.collectives.ops import (  # noqa: F401
    Adasum, Average, Max, Min, Product, Sum, allgather, allreduce, broadcast,
    global_process_set, grouped_allreduce)
from tf_ps_ops.collectives.process_sets import ProcessSet  # noqa: F401
from tf_ps_ops.collectives.register import add_process_set, remove_process_set  # noqa: F401
from tf_ps_ops.common.basics import (  # noqa: F401
    is_initialized, local_rank, local_rank_op, local_size, local_size_op, rank,
    rank_op, shutdown, size, size_op)
from tf_ps_ops.common.init import init  # noqa: F401
from tf_ps_ops.common.timeline import start_timeline, stop_timeline  # noqa: F401
from tf_ps_ops.keras import DistributedOptimizer, PartialDistributedOptimizer  # noqa: F401
from tf_ps_ops.training.sync_batch_norm import SyncBatchNormalization  # noqa: F401
from tf_ps_ops.training.tape import (  # noqa: F401
    DistributedGradientTape, PartialDistributedGradientTape)


def _executing_eagerly():
    """Horovod's helper, used by code (and tests) written against horovod.tensorflow."""
    return _tf.executing_eagerly()


class util:  # noqa: N801  (Horovod's horovod.tensorflow.util module, as a namespace)
    _executing_eagerly = staticmethod(_executing_eagerly)


for _name, _stand_in in {name: unserved(name) for name in UNSERVED}.items():
    setattr(sys.modules[__name__], _name, _stand_in)

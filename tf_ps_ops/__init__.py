"""tf_ps_ops: parameter-server data-parallel training for TensorFlow.

Horovod- and BytePS-compatible: a Horovod script runs with `import horovod.tensorflow as
hvd` (or `horovod.tensorflow.keras`) replaced by

    import tf_ps_ops as hvd

Names are resolved on first access (PEP 562): the launcher `tfps-run` lives in this
package and must start without importing TensorFlow (seconds) or the op library.
"""

from tf_ps_ops.common import lazy as _lazy
from tf_ps_ops.common.version import __version__  # noqa: F401

# Public name -> the module that defines it (docs/internals.md has the package's map).
_EXPORTS = {
    # common/: the cluster and this worker's place in it
    "init": "common.init",
    "shutdown": "common.basics", "is_initialized": "common.basics", "rank": "common.basics",
    "size": "common.basics", "local_rank": "common.basics", "local_size": "common.basics",
    "num_servers": "common.basics", "rank_op": "common.basics", "size_op": "common.basics",
    "local_rank_op": "common.basics", "local_size_op": "common.basics",
    "start_timeline": "common.timeline", "stop_timeline": "common.timeline",
    "metrics": "common.metrics", "metrics_text": "common.metrics",
    "metrics_port": "common.metrics",
    # Horovod's topology and build queries (which transports are built in: none of theirs)
    "cross_rank": "collectives.compat", "cross_size": "collectives.compat",
    "is_homogeneous": "collectives.compat", "mpi_built": "collectives.compat",
    "mpi_enabled": "collectives.compat", "mpi_threads_supported": "collectives.compat",
    "gloo_built": "collectives.compat", "gloo_enabled": "collectives.compat",
    "nccl_built": "collectives.compat", "ddl_built": "collectives.compat",
    "ccl_built": "collectives.compat", "cuda_built": "collectives.compat",
    "rocm_built": "collectives.compat",
    # collectives/: the collective operations
    "Average": "collectives.ops", "Sum": "collectives.ops", "Adasum": "collectives.ops",
    "Min": "collectives.ops", "Max": "collectives.ops", "Product": "collectives.ops",
    "global_process_set": "collectives.ops",
    "allreduce": "collectives.ops", "push_pull": "collectives.ops",
    "grouped_allreduce": "collectives.ops", "allgather": "collectives.ops",
    "broadcast": "collectives.ops", "broadcast_": "collectives.objects",
    "broadcast_variables": "collectives.objects", "broadcast_object": "collectives.objects",
    "broadcast_object_fn": "collectives.objects", "allgather_object": "collectives.objects",
    "alltoall": "collectives.alltoall", "reducescatter": "collectives.alltoall",
    "grouped_allgather": "collectives.alltoall", "grouped_reducescatter": "collectives.alltoall",
    "ProcessSet": "collectives.process_sets", "add_process_set": "collectives.register",
    "remove_process_set": "collectives.register",
    "join": "collectives.join", "barrier": "collectives.join",
    "Compression": "collectives.compression",
    "broadcast_global_variables": "collectives.compat",
    "BroadcastGlobalVariablesHook": "collectives.compat",
    # training/ and the Keras namespace: training glue
    "DistributedGradientTape": "training.tape", "PartialDistributedGradientTape": "training.tape",
    "SyncBatchNormalization": "training.sync_batch_norm",
    "DistributedOptimizer": "keras", "PartialDistributedOptimizer": "keras",
    "load_model": "keras",
    # ps/: PS mode, the servers run the optimizer
    "enable_graph_rewrite": "ps.ps_mode", "disable_graph_rewrite": "ps.ps_mode",
    "rewrite_graph_def": "ps.ps_mode",
}
# Submodules that are part of the API themselves (`hvd.callbacks.MetricAverageCallback`;
# `import tf_ps_ops.tensorflow` and `tf_ps_ops.keras` mirror Horovod's module layout;
# `tensorflow` stays out of __all__ so that a star import cannot shadow TensorFlow).
_SUBMODULES = ("algorithms", "callbacks", "compression", "elastic", "keras", "optimizers",
               "ps_mode")

__all__, __getattr__, __dir__ = _lazy.exports(globals(), _EXPORTS, _SUBMODULES)

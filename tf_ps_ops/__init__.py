"""tf_ps_ops: parameter-server data-parallel training for TensorFlow.

Horovod- and BytePS-compatible: a Horovod script runs with `import horovod.tensorflow as
hvd` (or `horovod.tensorflow.keras`) replaced by

    import tf_ps_ops as hvd

Names are resolved on first access (PEP 562): the launcher `tfps-run` lives in this
package and must start without importing TensorFlow (seconds) or the op library.
"""

from tf_ps_ops import _lazy

# Public name -> the submodule that defines it.
_EXPORTS = {
    # basics: the cluster and this worker's place in it
    "init": "basics", "shutdown": "basics", "is_initialized": "basics",
    "rank": "basics", "size": "basics", "local_rank": "basics", "local_size": "basics",
    "num_servers": "basics", "rank_op": "basics", "size_op": "basics",
    "local_rank_op": "basics", "local_size_op": "basics",
    "cross_rank": "_compat", "cross_size": "_compat", "is_homogeneous": "_compat",
    # Horovod's build queries: which transports are built in (none of theirs)
    "mpi_built": "_compat", "mpi_enabled": "_compat", "mpi_threads_supported": "_compat",
    "gloo_built": "_compat", "gloo_enabled": "_compat", "nccl_built": "_compat",
    "ddl_built": "_compat", "ccl_built": "_compat", "cuda_built": "_compat",
    "rocm_built": "_compat",
    # collective operations
    "Average": "ops", "Sum": "ops", "Adasum": "ops", "Min": "ops", "Max": "ops",
    "Product": "ops", "global_process_set": "ops",
    "ProcessSet": "process_sets", "add_process_set": "process_sets",
    "remove_process_set": "process_sets", "join": "_join", "barrier": "_join",
    "allreduce": "ops", "push_pull": "ops", "grouped_allreduce": "ops",
    "allgather": "ops", "broadcast": "ops", "broadcast_": "ops",
    "broadcast_variables": "ops", "broadcast_object": "ops", "broadcast_object_fn": "ops",
    "allgather_object": "ops",
    "alltoall": "collectives", "reducescatter": "collectives",
    "grouped_allgather": "collectives", "grouped_reducescatter": "collectives",
    "Compression": "compression",
    "broadcast_global_variables": "_compat", "BroadcastGlobalVariablesHook": "_compat",
    # training glue
    "DistributedGradientTape": "tape", "PartialDistributedGradientTape": "tape",
    "PartialDistributedOptimizer": "keras",
    "DistributedOptimizer": "keras", "load_model": "keras",
    "SyncBatchNormalization": "sync_batch_norm",
    "start_timeline": "_timeline", "stop_timeline": "_timeline",
    # PS mode: the servers run the optimizer
    "enable_graph_rewrite": "ps_mode", "disable_graph_rewrite": "ps_mode",
    "rewrite_graph_def": "ps_mode",
}
# Submodules that are part of the API themselves (`hvd.callbacks.MetricAverageCallback`;
# `import tf_ps_ops.tensorflow` and `tf_ps_ops.keras` mirror Horovod's module layout;
# `tensorflow` stays out of __all__ so that a star import cannot shadow TensorFlow).
_SUBMODULES = ("algorithms", "callbacks", "compression", "elastic", "keras", "optimizers",
               "ps_mode")

__all__, __getattr__, __dir__ = _lazy.exports(globals(), _EXPORTS, _SUBMODULES)

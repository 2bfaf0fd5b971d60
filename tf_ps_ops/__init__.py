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
    # collective operations
    "Average": "ops", "Sum": "ops", "Adasum": "ops",
    "allreduce": "ops", "push_pull": "ops", "grouped_allreduce": "ops",
    "allgather": "ops", "broadcast": "ops", "broadcast_": "ops",
    "broadcast_variables": "ops", "broadcast_object": "ops", "broadcast_object_fn": "ops",
    "allgather_object": "ops",
    "Compression": "compression",
    # training glue
    "DistributedGradientTape": "tape",
    "DistributedOptimizer": "keras",
    # PS mode: the servers run the optimizer
    "enable_graph_rewrite": "ps_mode", "disable_graph_rewrite": "ps_mode",
    "rewrite_graph_def": "ps_mode",
}
# Submodules that are part of the API themselves (`hvd.callbacks.MetricAverageCallback`).
_SUBMODULES = ("callbacks", "compression", "keras", "optimizers", "ps_mode")

__all__, __getattr__, __dir__ = _lazy.exports(globals(), _EXPORTS, _SUBMODULES)

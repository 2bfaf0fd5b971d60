"""What a sparse table costs in PS mode, said once: every step each worker pushes every
partition of the table, rows or none, and gets a reply (docs/ps_mode.md). The sparse
update paths of tf_ps_ops.optimizers and tf_ps_ops.optimizers.tf_keras call
note_sparse_table where they make the update op."""

import logging
import threading

import numpy as np
import tensorflow as tf

_log = logging.getLogger("tf_ps_ops")
_lock = threading.Lock()

MANY_PARTITIONS = 256
_noted_tables = set()


def note_sparse_table(variable, key):
    """Logs once per table, on rank 0, when a table whose gradients go to the servers as
    rows has so many partitions that their messages cost more than a few ms per step:
    every step each worker pushes every partition, rows or none, and gets a reply
    (docs/ps_mode.md). Called where the sparse update op is made."""
    from tf_ps_ops.common import basics, config
    from tf_ps_ops.plan import cost

    partition = config.engine_int("TFPS_PARTITION_BYTES")
    # A keras.Variable's shape is a tuple, a tf.Variable's a TensorShape.
    elements = int(np.prod([int(d or 0) for d in tuple(variable.shape)]))
    table_bytes = elements * tf.as_dtype(variable.dtype).size
    partitions = -(-table_bytes // max(1, partition))
    with _lock:
        if partitions < MANY_PARTITIONS or key in _noted_tables:
            return
        _noted_tables.add(key)
    basics.log_on_rank0(
        _log, f"PS mode: table {key!r} ({table_bytes / 2 ** 20:.0f} MiB) is {partitions} "
        f"partitions of TFPS_PARTITION_BYTES={partition}; every step each worker pushes "
        f"every partition, rows or none, about {partitions * cost.PARTITION_CPU * 1e3:.1f} "
        f"ms of CPU per step on each worker and as much per worker on the servers, whatever "
        f"rows it touches. A larger TFPS_PARTITION_BYTES makes fewer partitions (of every "
        f"tensor).")

"""Horovod's join() and barrier().

join(): a worker that has run out of data calls it. Until every worker has joined, the
servers count it as having pushed zeros to every summation round it is due in (allreduce,
grouped_allreduce, reducescatter, the optimizer and tape wrappers; of the global set and of
the process sets it belongs to), so the workers still training keep going: their sum is over
the workers still working, and Average still divides by the whole set's size, as Horovod's
does. Min, Max and Product include the joined workers' zeros, as in Horovod. join() returns
the last rank to join, on every worker. While the others live they are waited for, with a
stall warning every TFPS_STALL_WARNING; a worker gone before joining fails the join at once,
and TFPS_STALL_SHUTDOWN (if set) bounds the wait (then every joined worker gets
DeadlineExceededError naming the ranks that did not join).

Not covered while a worker is joined: collectives that do not go through the servers'
summation rounds (allgather and alltoall of the global set, which are peer to peer;
broadcast from a joined root gives zeros), and PS mode. A joined worker's own call counts
stay behind for the keys it was counted in; the servers remember by how much and keep its
later pushes in step (SumRounds::InRoundSteps), so the next epoch can reuse the names.

Under hierarchical aggregation (several workers on a host, TFPS_HIERARCHICAL=1, the
default) it works the same way, with the same results as TFPS_HIERARCHICAL=0
(docs/hierarchical.md, "join()"): the local leader counts a joined worker of its host as
zeros, and a local leader that joins while its host's other workers still train keeps
pushing their local sums, with zeros as its own part, for every name it called before (a
name it never called fails at once on those workers with FailedPreconditionError). Not
for GPU tensors summed with NCCL: there join() raises FailedPreconditionError naming
TFPS_HIERARCHICAL=0.

barrier(): returns once every worker (of `process_set`) has reached it; a live worker that
does not come gets stall warnings, and after TFPS_STALL_SHUTDOWN (if set) makes it fail on
the others with DeadlineExceededError naming the missing ranks.
"""

import ctypes

import tensorflow as tf
from tensorflow.python.framework import errors_impl

from tf_ps_ops.collectives.process_sets import global_process_set
from tf_ps_ops.common import library as _library


def _join_now():
    lib = _library.c_api()
    if not lib.tfps_is_initialized():
        raise ValueError("join() needs tf_ps_ops.init() first")
    error = ctypes.create_string_buffer(4096)
    last = lib.tfps_join(error, len(error))
    if last < 0:
        code = -last
        where = f"worker {lib.tfps_rank()}"
        if lib.tfps_hierarchical():
            where += f" (local rank {lib.tfps_local_rank()}, hierarchical aggregation)"
        raise errors_impl.exception_type_from_error_code(code)(
            None, None, f"join() of {where}: {error.value.decode(errors='replace')}")
    return last


def join(device=""):
    """Tells the other workers that this one has run out of data and waits until every
    worker has joined; returns the last rank to join (an int32 scalar tensor). `device`
    is accepted for Horovod's signature. In a graph, it runs when the op does."""
    if tf.executing_eagerly():
        return tf.constant(_join_now(), tf.int32)
    return tf.py_function(lambda: tf.constant(_join_now(), tf.int32), [], tf.int32,
                          name="HorovodJoin")


def barrier(process_set=global_process_set):
    """Waits until every worker of `process_set` (default: all) reaches the barrier.
    Returns None eagerly and in tf.function, and the barrier op in a v1 graph."""
    from tf_ps_ops.collectives.ops import Sum, allreduce

    def wait():
        try:
            return allreduce(tf.zeros([1], tf.int32), op=Sum, name="tfps.barrier",
                             process_set=process_set)
        except tf.errors.DeadlineExceededError as e:
            raise tf.errors.DeadlineExceededError(
                None, None, f"barrier() timed out: {e.message}") from None

    if tf.executing_eagerly():
        wait()
        return None
    if tf.inside_function():  # the stateful op runs in program order (automatic deps)
        allreduce(tf.zeros([1], tf.int32), op=Sum, name="tfps.barrier", process_set=process_set)
        return None
    return tf.group(allreduce(tf.zeros([1], tf.int32), op=Sum, name="tfps.barrier",
                              process_set=process_set), name="HorovodBarrier")

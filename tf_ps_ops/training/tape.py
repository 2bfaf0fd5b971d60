"""DistributedGradientTape: a tf.GradientTape whose gradients are averaged over workers."""

import functools

import tensorflow as tf

from tf_ps_ops.collectives.compression import Compression
from tf_ps_ops.collectives.objects import keys_for
from tf_ps_ops.collectives.ops import Average, Sum, _resolve_op, allreduce
from tf_ps_ops.collectives.process_sets import global_process_set, set_size
from tf_ps_ops.common.basics import size
from tf_ps_ops.training.aggregation import LocalAggregation
from tf_ps_ops.training.local_vars import LocalVariables


def check_gradient_options(op, gradient_predivide_factor):
    """Validates the reduction options shared by the tape and the Keras optimizer."""
    op = _resolve_op(op, None)
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor is only supported with op=Average")
    return op


def reduce_gradients(grads, keys, compression, op, gradient_predivide_factor=1.0,
                     device_dense="", variables=(), process_set=None, sparse_as_dense=False,
                     device_sparse=""):
    """allreduce of each gradient under its key; None gradients stay None. `compression`:
    one compressor for all, or {key: compressor} (a key not in it: Compression.none).

    With op=Average and a predivide factor f, as in Horovod: each worker multiplies by
    1/f before the sum and the sum is multiplied by f/size() after it. A tf.IndexedSlices
    gradient (an embedding's) is allgathered as Horovod does, values and indices, so only
    the touched rows travel; it takes no scale factors and no compression, and is averaged
    as it is (the same result). With `sparse_as_dense` it is made dense first and reduced
    like any other gradient (compression and scale factors apply); `sparse_as_dense` may
    also be a set of keys, those of the gradients to make dense (a plan's choice).
    """
    if sparse_as_dense:
        grads = [_as_dense(grad) if sparse_as_dense is True or key in sparse_as_dense
                 else grad for grad, key in zip(grads, keys)]
    prescale = postscale = 1.0
    slices_op = op
    if op == Average and gradient_predivide_factor != 1.0:
        op = Sum
        prescale = 1.0 / gradient_predivide_factor
        postscale = gradient_predivide_factor / set_size(process_set)
    # sfb.Dense kernels (marked `_tfps_sfb`) arrive already averaged over workers.
    sfb = [getattr(v, "_tfps_sfb", False) for v in variables] or [False] * len(grads)
    # Each gradient's op takes its variable (so a tf.function overlaps the communication
    # with the rest of backward) and its index as priority: variables come in layer
    # order, and the layers nearest the input are needed first by the next forward pass.
    variables = list(variables) or [None] * len(grads)
    # A dict (a plan's choice per key) gives each gradient its own compressor.
    per_key = compression if isinstance(compression, dict) else None
    return [grad if grad is None or skip else
            allreduce(grad, device_dense=device_dense, device_sparse=device_sparse,
                      compression=per_key.get(key, Compression.none) if per_key is not None
                      else compression,
                      **_scaling(grad, op, prescale, postscale, slices_op), name=key,
                      _variable=_handle_owner(variable), _priority=index,
                      process_set=process_set or global_process_set)
            for index, (grad, key, skip, variable)
            in enumerate(zip(grads, keys, sfb, variables))]


def _as_dense(grad):
    # Horovod's sparse_as_dense: an IndexedSlices becomes its dense tensor (on the device
    # of its values, as Horovod's tape does).
    if not isinstance(grad, tf.IndexedSlices):
        return grad
    with tf.device(grad.values.device):
        return tf.convert_to_tensor(grad)


def _scaling(grad, op, prescale, postscale, slices_op):
    if isinstance(grad, tf.IndexedSlices):
        return dict(op=slices_op)
    return dict(op=op, prescale_factor=prescale, postscale_factor=postscale)


def _handle_owner(variable):
    """The variable if it exposes a resource handle (tf.Variable, keras.Variable)."""
    try:
        return variable if variable is not None and variable.handle is not None else None
    except (AttributeError, ValueError, TypeError):
        return None


class _DistributedGradientTapeMixin:
    """Placed before the user's tape class in the MRO, so `super()` is that class."""

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        """The local gradients, each averaged (or summed) over all workers.

        Every worker must ask for the same sources in the same order. A gradient that
        is a tf.IndexedSlices is allgathered (values and indices, the touched rows only)
        and returned as a tf.IndexedSlices, or, with sparse_as_dense=True, reduced as a
        dense tensor; a None gradient stays None.
        """
        grads = super().gradient(target, sources, output_gradients, unconnected_gradients)
        keys = keys_for(tf.nest.flatten(sources), "DistributedGradientTape")
        algorithm = getattr(self, "_tfps_algorithm", None)
        if algorithm is not None:
            return tf.nest.pack_sequence_as(grads, algorithm.run(
                None, tf.nest.flatten(grads), tf.nest.flatten(sources), keys))

        def reduce_some(grads_, keys_, sources_):
            return reduce_gradients(grads_, keys_, self._tfps_compression, self._tfps_op,
                                    self._tfps_predivide, self._tfps_device, sources_,
                                    getattr(self, "_tfps_process_set", None),
                                    getattr(self, "_tfps_sparse_as_dense", False),
                                    getattr(self, "_tfps_device_sparse", ""))

        def reduce(flat):
            local = getattr(self, "_tfps_local", None)
            if local:  # PartialDistributedGradientTape / register_local_source
                return local.reduce(flat, keys, tf.nest.flatten(sources), reduce_some)
            return reduce_some(flat, keys, tf.nest.flatten(sources))

        passes, average = getattr(self, "_tfps_aggregation", (1, False))
        if passes > 1:  # backward_passes_per_step (training/aggregation.py)
            aggregation = _aggregation_for(tuple(keys), passes, average)
            return tf.nest.pack_sequence_as(grads, aggregation.gradients(
                tf.nest.flatten(grads), tf.nest.flatten(sources), reduce))
        return tf.nest.pack_sequence_as(grads, reduce(tf.nest.flatten(grads)))

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       unconnected_gradients=tf.UnconnectedGradients.NONE):
        """Horovod's: gradient(), split into ([(source, grad)] of the local sources,
        [(source, grad)] of the others), each in the order of `sources`."""
        grads = self.gradient(target, sources, output_gradients, unconnected_gradients)
        local = getattr(self, "_tfps_local", None) or ()
        local_pairs, global_pairs = [], []
        for source, grad in zip(tf.nest.flatten(sources), tf.nest.flatten(grads)):
            (local_pairs if source in local else global_pairs).append((source, grad))
        return local_pairs, global_pairs

    def register_local_source(self, source):
        """Horovod's: `source`'s gradient stays this worker's own, never reduced."""
        if getattr(self, "_tfps_local", None) is None:
            self._tfps_local = LocalVariables()
        self._tfps_local.register(source)


_AGGREGATIONS = {}  # (source keys, passes, average) -> LocalAggregation


def _aggregation_for(keys, passes, average):
    # Tapes are made anew each step; the sums of one set of sources carry over.
    if (keys, passes, average) not in _AGGREGATIONS:
        _AGGREGATIONS[keys, passes, average] = LocalAggregation(passes, average)
    return _AGGREGATIONS[keys, passes, average]


@functools.cache
def _distributed_class(tape_class):
    # Keeps the user's class name and isinstance relations, like Horovod's wrapper.
    return type(tape_class.__name__, (_DistributedGradientTapeMixin, tape_class), {})


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            algorithm=None, process_set=global_process_set,
                            backward_passes_per_step=1, average_aggregated_gradients=False):
    """Wraps a tf.GradientTape so that gradient() averages gradients over all workers.

    Usage, as in Horovod:

        with tf.GradientTape() as tape:
            loss = ...
        tape = tf_ps_ops.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)

    Keys are 'DistributedGradientTape.' + each source's variable path or name, so they
    match across workers without depending on call order within a step.

    Args:
      gradtape: the recorded tape; the wrapper shares its recording.
      compression: Compression.none or Compression.fp16 (or a Compressor).
      sparse_as_dense: False (default), as in Horovod: a sparse gradient (a
        tf.IndexedSlices, from tf.gather or an Embedding layer) is allgathered, values and
        indices, so only the rows this step touched travel, and gradient() returns a
        tf.IndexedSlices (each worker's rows, averaged values); compression and
        gradient_predivide_factor do not apply to it. True: it is made dense first and
        reduced like the other gradients (better when most rows are touched every step).
        With backward_passes_per_step > 1 sparse gradients are summed into dense buffers
        and reduced dense whatever this says.
      op: Average (default) or Sum.
      gradient_predivide_factor: with op=Average, divide by this before the sum and by
        size()/factor after it.
      device_dense: device for the reduction ops ('' lets TF place them).
      algorithm: a tf_ps_ops.algorithms.Algorithm that decides what travels instead of
        the gradient average (docs/algorithms.md): gradient() then runs its hooks (for
        Decentralized it averages the weights with the neighbours') and returns the
        gradients to apply. QAdam runs its own update: use DistributedOptimizer for it.
      process_set: average over that process set's members only (every member wraps its
        tape; tf_ps_ops/collectives/process_sets.py).
      backward_passes_per_step: N > 1 adds the gradients up locally and reduces them on
        every N-th call of gradient() only; the calls between return the local sums so
        far, not reduced (Horovod's optimizer-side local gradient aggregation, here on the
        tape; Horovod's own tape has no such argument). The sums belong to the set of
        sources, so a new tape wrapped each step continues them.
      average_aggregated_gradients: with N > 1, divide the reduced sums by N.
      device_sparse: device for the gathers of sparse gradients ('' lets TF place them).
      num_groups, groups: accepted for Horovod compatibility. Grouping
        only fuses communication in Horovod; the engine here batches and partitions
        tensors itself, and results do not depend on it.
    """
    op = check_gradient_options(op, gradient_predivide_factor)
    cls = _distributed_class(type(gradtape))
    tape = cls.__new__(cls)
    # Share the recorded state (`_tape`, `_persistent`, watched variables, ...) instead
    # of re-recording: users wrap the tape after their `with` block has closed.
    tape.__dict__.update(gradtape.__dict__)
    tape._tfps_compression = compression
    tape._tfps_op = op
    tape._tfps_predivide = gradient_predivide_factor
    tape._tfps_device = device_dense
    tape._tfps_process_set = process_set
    tape._tfps_sparse_as_dense = bool(sparse_as_dense)
    tape._tfps_device_sparse = device_sparse
    if algorithm is not None and getattr(algorithm, "owns_step", False):
        raise ValueError(f"{type(algorithm).__name__} runs the optimizer's update itself: use "
                         "DistributedOptimizer(opt, algorithm=...) rather than the tape")
    tape._tfps_algorithm = algorithm
    passes = LocalAggregation(backward_passes_per_step, average_aggregated_gradients).passes
    if passes > 1 and algorithm is not None:
        raise ValueError(
            "DistributedGradientTape(backward_passes_per_step > 1) cannot be combined with an "
            "algorithm: the tape hands back the local sums on the passes between, and you "
            "apply them, so the weights the algorithm's step would see every N-th pass have "
            "already moved. Use DistributedOptimizer(opt, algorithm=..., "
            "backward_passes_per_step=N), which aggregates locally and runs one algorithm "
            "step every N-th pass")
    tape._tfps_aggregation = (passes, bool(average_aggregated_gradients))
    return tape


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set,
                                   local_layers=None,
                                   scale_local_gradients=True):
    """DistributedGradientTape whose `local_layers` (a Keras layer or a list) keep their
    own gradients, as Horovod's: not reduced over workers, and divided by size() with
    `scale_local_gradients`. More sources can be made local with
    `register_local_source`."""
    from tf_ps_ops.collectives.ops import _check_process_set
    _check_process_set(process_set)
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor,
                                   num_groups, groups, process_set=process_set)
    tape._tfps_local = LocalVariables(scale_local_gradients)
    tape._tfps_local.register_layers(local_layers)
    return tape

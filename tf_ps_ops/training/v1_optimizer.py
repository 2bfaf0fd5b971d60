"""DistributedOptimizer for tf.compat.v1.train.Optimizer (Horovod's horovod.tensorflow
one, for v1 graphs run by a Session): compute_gradients returns the gradients reduced over
workers; with backward_passes_per_step N > 1 they add up locally and only the N-th pass
reduces them, and apply_gradients updates the variables on that pass only (the others
only advance `global_step`), as Horovod's graph-mode aggregation helper does.
"""

import tensorflow as tf

from tf_ps_ops.collectives.objects import keys_for
from tf_ps_ops.training.aggregation import LocalAggregation
from tf_ps_ops.training.local_vars import LocalVariables


class DistributedV1Optimizer(tf.compat.v1.train.Optimizer):
    def __init__(self, optimizer, name, compression, op, gradient_predivide_factor,
                 device_dense, backward_passes_per_step, average_aggregated_gradients,
                 sparse_as_dense=False, device_sparse=""):
        name = name or f"Distributed{type(optimizer).__name__}"
        super().__init__(use_locking=False, name=name)
        self._optimizer = optimizer
        self._key_prefix = name
        self._reduce_args = (compression, op, gradient_predivide_factor, device_dense)
        self._sparse_args = (bool(sparse_as_dense), device_sparse)  # training/tape.py
        aggregation = LocalAggregation(backward_passes_per_step, average_aggregated_gradients)
        self._aggregation = aggregation if aggregation.passes > 1 else None
        self._local = LocalVariables()

    def register_local_var(self, var):
        """Horovod's: `var`'s gradient stays this worker's own, never reduced."""
        self._local.register(var)

    def _reduce(self, grads, keys, variables):
        from tf_ps_ops.training.tape import reduce_gradients  # tape imports keras-free modules only
        compression, op, predivide, device = self._reduce_args

        def reduce(grads_, keys_, variables_):
            return reduce_gradients(grads_, keys_, compression, op, predivide, device,
                                    variables_, None, *self._sparse_args)

        if self._local:
            return self._local.reduce(grads, keys, variables, reduce)
        return reduce(grads, keys, variables)

    def compute_gradients(self, *args, **kwargs):
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = [list(x) for x in zip(*pairs)]
        keys = keys_for(variables, self._key_prefix)
        if self._aggregation is None:
            grads = self._reduce(grads, keys, variables)
        else:
            grads = self._aggregation.gradients(
                grads, variables, lambda summed: self._reduce(summed, keys, variables))
        return list(zip(grads, variables))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = list(grads_and_vars)
        if self._aggregation is None:
            return self._optimizer.apply_gradients(grads_and_vars, global_step, name)
        # compute_gradients reset the pass counter to 0 on the N-th pass: apply then.
        with tf.control_dependencies([g for g, _ in grads_and_vars if g is not None]):
            last = tf.equal(self._aggregation.counter.read_value(), 0)

        def apply():
            with tf.control_dependencies(
                    [self._optimizer.apply_gradients(grads_and_vars, global_step, name)]):
                return tf.constant(True)

        def skip():
            steps = [] if global_step is None else [
                tf.compat.v1.assign_add(global_step, 1)]
            with tf.control_dependencies(steps):
                return tf.constant(False)

        return tf.cond(last, apply, skip)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)

"""The gradient reduction DistributedOptimizer adds to a Keras optimizer, for Keras 3
(`apply`) and for Keras 2, the tf_keras package (`apply_gradients`).

Each is a mixin placed before the user's optimizer class in the MRO of a class made per
optimizer class (`distributed_class`), so `super()` is the user's class.
"""

import dataclasses
import functools

import numpy as np
import tensorflow as tf

from tf_ps_ops.collectives.compression import Compression
from tf_ps_ops.collectives.objects import keys_for
from tf_ps_ops.collectives.ops import Average
from tf_ps_ops.training.keras_flavor import build_optimizer
from tf_ps_ops.training.local_vars import LocalVariables, reduce_all_but
from tf_ps_ops.training.tape import reduce_gradients


class ReducingMixin:
    """The reduction options and the reduction itself, shared by both Keras."""

    # Defaults for optimizers made by deserialisation (load_model) rather than by
    # DistributedOptimizer(), which sets its own.
    _tfps_key_prefix = None
    _tfps_compression = Compression.none
    _tfps_op = Average
    _tfps_predivide = 1.0
    _tfps_device = ""
    _tfps_sparse_as_dense = False  # True: IndexedSlices gradients are reduced dense
    _tfps_device_sparse = ""
    _tfps_algorithm = None  # a tf_ps_ops.algorithms.Algorithm (docs/algorithms.md)
    _tfps_process_set = None  # None: every worker
    _tfps_aggregation = None  # backward_passes_per_step > 1 (training/aggregation.py)
    _tfps_local = None  # LocalVariables: not reduced (register_local_var, training/local_vars.py)

    def register_local_var(self, var):
        """Horovod's: `var`'s gradient stays this worker's own, never reduced."""
        if self._tfps_local is None:
            self._tfps_local = LocalVariables()
        self._tfps_local.register(var)

    def _tfps_keys(self, variables):
        return keys_for(variables, self._tfps_key_prefix or f"Distributed{type(self).__name__}")

    _tfps_plan = None  # cluster measurements when DistributedOptimizer(plan="auto")
    _tfps_plan_optimizer = None  # plan="auto": the user's optimizer, for its probes
    _tfps_plan_pins = None
    _tfps_planned = None  # {key: compressor}, made at the first reduction
    _tfps_densified = frozenset()  # keys of the sparse gradients the plan sums dense
    # plan="auto" and PS mode: why the servers cannot run this optimizer's update (None:
    # they can), and the variables the plan gave them ({id(keras variable): server key}).
    _tfps_no_ps = "a tf_keras optimizer"
    _tfps_served = {}

    def _tfps_compression_for(self, grads, keys, variables):
        """The job's compressor, or under plan="auto" the planner's per key (planned once,
        from the gradients' sizes: the same on every worker). SFB kernels' gradients
        (already exchanged) and None gradients are not in the plan. A tf.IndexedSlices
        gradient is planned as an embedding with the rows it has in this step (its static
        shape): gathered, or summed dense where that moves fewer bytes."""
        if self._tfps_plan is None:
            return self._tfps_compression
        if self._tfps_planned is None:
            from tf_ps_ops.plan import auto

            variables = list(variables) or [None] * len(grads)
            sparse = {} if self._tfps_sparse_as_dense else {
                k: _slices_table(g, v) for g, k, v in zip(grads, keys, variables)
                if isinstance(g, tf.IndexedSlices)}
            # Slices whose rows this trace does not know are gathered, unplanned.
            reduced = [(k, int(np.prod(v.shape if k in sparse else g.shape)))
                       for g, k, v in zip(grads, keys, variables)
                       if g is not None and not getattr(v, "_tfps_sfb", False)
                       and (k not in sparse or sparse[k][2] is not None)]
            measured = self._tfps_plan
            widths = sorted({table[1] for table in sparse.values() if table[2] is not None})
            if widths and self._tfps_plan_optimizer is not None and \
                    not measured.machine.apply_per_row:
                # Every worker's rows come back to be updated here: the optimizer's
                # update of a row, timed at the widest table's width (collective: every
                # worker traces this step).
                from tf_ps_ops.plan import update_probe

                # Not converted by autograph (this runs while the step is traced): its
                # probe is a tf.function of its own.
                probe = tf.autograph.experimental.do_not_convert(update_probe.sparse_apply_cost)
                measured = dataclasses.replace(measured, machine=dataclasses.replace(
                    measured.machine, apply_row_width=widths[-1],
                    apply_per_row=probe(self._tfps_plan_optimizer, widths[-1])))
                self._tfps_plan = measured
            # Planned while the step is traced: autograph would convert the planner's
            # plain Python (ResNet-50's 161 gradients with a codec to weigh: minutes).
            plan = tf.autograph.experimental.do_not_convert(auto.compressions)
            self._tfps_planned, self.tfps_plan = plan(
                [k for k, _ in reduced], [n for _, n in reduced], measured,
                self._tfps_plan_pins, sparse=sparse, ps=self._tfps_no_ps,
                row_update=_updates_rows_only(self))
            self._tfps_densified = auto.densified(self.tfps_plan)
            self._tfps_serve(auto.served(self.tfps_plan), keys, variables)
        return self._tfps_planned

    def _tfps_serve(self, served_keys, keys, variables):
        """Gives the servers the variables the plan put in PS mode: rank 0's values, which
        every worker adopts (at trace time, before the first update)."""
        if not served_keys:
            return
        from tf_ps_ops.plan import auto
        from tf_ps_ops.ps.optimizers import init_on_servers
        from tf_ps_ops.ps.ps_mode import ps_key

        pairs = [(v, ps_key(k)) for k, v in zip(keys, variables) if k in served_keys]
        init_on_servers([v for v, _ in pairs], [k for _, k in pairs])
        self._tfps_served = {id(v): k for v, k in pairs}
        auto.log_once(f"plan: the servers run {type(self).__name__}'s update of "
                      f"{len(pairs)} of {len(keys)} variables (PS mode; their optimizer "
                      f"slots live on the servers, TFPS_PLAN_MODES=sum keeps them here)")

    def _tfps_reduce(self, grads, keys, variables):
        def reduce(grads_, keys_, variables_):
            compression = self._tfps_compression_for(grads_, keys_, variables_)

            def reduce_some(grads_, keys_, variables_):
                return reduce_gradients(grads_, keys_, compression, self._tfps_op,
                                        self._tfps_predivide, self._tfps_device, variables_,
                                        self._tfps_process_set,
                                        self._tfps_sparse_as_dense or self._tfps_densified,
                                        self._tfps_device_sparse)

            # PS mode (plan="auto"): the local gradient goes to the servers as it is.
            return reduce_all_but(grads_, keys_, list(variables_),
                                  lambda v: id(v) in self._tfps_served, reduce_some)

        if self._tfps_local:
            return self._tfps_local.reduce(grads, keys, variables, reduce)
        return reduce(grads, keys, variables)

    def algorithm_callbacks(self):
        """The Keras callbacks the algorithm needs under `fit` (none for most)."""
        return [] if self._tfps_algorithm is None else self._tfps_algorithm.callbacks()


def _updates_rows_only(optimizer):
    """Whether in PS mode the optimizer updates an embedding's touched rows only (plain
    SGD, Adagrad): then its gradient's rows travel, else the dense gradient."""
    import keras

    if isinstance(optimizer, keras.optimizers.SGD):
        return not optimizer.momentum
    return isinstance(optimizer, keras.optimizers.Adagrad)


def _slices_table(slices, variable):
    """(table rows, row width, rows in this step or None) of a variable's tf.IndexedSlices
    gradient: the variable's shape is static where the slices' dense_shape, a tensor, may
    not be inside a traced step."""
    shape = variable.shape
    return (int(shape[0]), int(np.prod(shape[1:])), slices.values.shape[0])


class TfKerasMixin(ReducingMixin):
    """tf_keras (Keras 2) optimizers, new and legacy: `fit`'s train step (`minimize`) and
    custom loops both update through `apply_gradients`, which reduces the gradients first.

    (Horovod 0.28 reduces in `_compute_gradients`, so there `apply_gradients` alone does
    not average; here it does, as `apply` does for Keras 3. Gradients from a
    DistributedGradientTape would then be averaged twice: use one or the other.)
    """

    def apply_gradients(self, grads_and_vars, name=None, **kwargs):
        pairs = list(grads_and_vars)
        grads = [grad for grad, _ in pairs]
        variables = [variable for _, variable in pairs]
        keys = self._tfps_keys(variables)
        if self._tfps_aggregation is None:
            reduced = self._tfps_reduce(grads, keys, variables)
            return super().apply_gradients(list(zip(reduced, variables)), name=name, **kwargs)
        # backward_passes_per_step > 1: as for Keras 3, the variables change every N-th
        # pass only; the passes between count `iterations`. The slots are made up front,
        # not inside the tf.cond of a traced step.
        with tf.init_scope():
            build_optimizer(self, variables)

        def apply(summed):
            return super(TfKerasMixin, self).apply_gradients(
                list(zip(summed, variables)), name=name, **kwargs)

        return self._tfps_aggregation.apply(
            grads, variables, lambda summed: self._tfps_reduce(summed, keys, variables),
            apply, lambda: self.iterations.assign_add(1))


@functools.cache
def distributed_class(optimizer_class, mixin):
    # Same name, module and isinstance relations as the user's optimizer: a saved model
    # then names the user's class and loads with a plain, non-distributed optimizer, to
    # be wrapped again (Horovod's hvd.load_model does the same).
    return type(optimizer_class.__name__, (mixin, optimizer_class),
                {"__module__": optimizer_class.__module__,
                 "__qualname__": optimizer_class.__qualname__})

"""Keras glue (Keras 3 and tf_keras), laid out as Horovod's `horovod.tensorflow.keras`:

    import tf_ps_ops.keras as hvd       # for `import horovod.tensorflow.keras as hvd`

DistributedOptimizer averages gradients over workers before each update; `load_model`
loads a model saved with one; `hvd.callbacks` are the Keras callbacks; `Embedding` is
keras.layers.Embedding without its per-step copy of a sparsely updated table. Horovod
names we do not serve raise NotImplementedError with the reason when called.
"""

import dataclasses

import keras
import tensorflow as tf

from tf_ps_ops import callbacks, elastic  # noqa: F401  (hvd.callbacks, .elastic)
from tf_ps_ops.collectives import ops
from tf_ps_ops.collectives.alltoall import reducescatter  # noqa: F401
from tf_ps_ops.collectives.compat import (  # noqa: F401
    broadcast_global_variables, ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
    gloo_built, gloo_enabled, is_homogeneous, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, rocm_built)
from tf_ps_ops.collectives.compression import Compression
from tf_ps_ops.collectives.objects import (  # noqa: F401
    allgather_object, broadcast_object, keys_for)
from tf_ps_ops.collectives.ops import (  # noqa: F401
    Adasum, Average, Max, Min, Product, Sum, global_process_set)
from tf_ps_ops.common.basics import (  # noqa: F401
    is_initialized, local_rank, local_size, rank, shutdown, size)
from tf_ps_ops.common.init import init  # noqa: F401
from tf_ps_ops.common.timeline import start_timeline, stop_timeline  # noqa: F401
from tf_ps_ops.training.aggregation import LocalAggregation
from tf_ps_ops.training.embedding import Embedding  # noqa: F401
from tf_ps_ops.training.keras_flavor import is_tf_keras, tf_dot_keras_is_tf_keras
from tf_ps_ops.training.keras_optimizer import ReducingMixin, TfKerasMixin, distributed_class
from tf_ps_ops.training.local_vars import LocalVariables
from tf_ps_ops.training.sync_batch_norm import SyncBatchNormalization  # noqa: F401
from tf_ps_ops.training.tape import check_gradient_options, reduce_gradients  # noqa: F401


class _DistributedOptimizerMixin(ReducingMixin):
    """Keras 3 optimizers. Keras 3 routes every update through `apply`: `fit`'s train
    step, `apply_gradients` and custom loops alike. (Horovod 0.28 hooks methods Keras 3
    no longer calls, so its `fit` silently trains each replica on its own gradients.)
    """

    def apply(self, grads, trainable_variables=None):
        if trainable_variables is None:
            if not self.built:
                return super().apply(grads)  # Keras raises its own, clear error
            variables = self._trainable_variables
        else:
            variables = trainable_variables = list(trainable_variables)
        grads = list(grads)
        keys = self._tfps_keys(variables)
        if self._tfps_algorithm is not None:
            def optimizer_step(grads_, variables_):
                return super(_DistributedOptimizerMixin, self).apply(grads_, trainable_variables)

            if self._tfps_aggregation is not None:
                return self._apply_aggregated_algorithm(grads, variables, keys, optimizer_step)
            return self._tfps_algorithm.run(optimizer_step, grads, variables, keys)
        if self._tfps_aggregation is not None:
            return self._apply_aggregated(grads, variables, keys, trainable_variables)
        grads = self._tfps_reduce(grads, keys, variables)
        return super().apply(grads, trainable_variables)

    def update_step(self, gradient, variable, learning_rate):
        if self._tfps_served:
            # Keras may pass the backend's variable; its own list has the Keras one.
            mine = self._trainable_variables[self._get_variable_index(variable)]
            key = self._tfps_served.get(id(mine))
            if key is not None:  # plan="auto" put it in PS mode: the servers update it
                return self._tfps_server_step(self, gradient, variable, learning_rate, key)
        return super().update_step(gradient, variable, learning_rate)

    def _apply_aggregated(self, grads, variables, keys, trainable_variables):
        # backward_passes_per_step > 1: the variables change every N-th pass only; the
        # passes between only count `iterations`, as Horovod's aggregation helper does.
        if not self.built:
            with tf.init_scope():
                self.build(variables)

        def reduce(summed):
            return self._tfps_reduce(summed, keys, variables)

        def apply(reduced):
            return super(_DistributedOptimizerMixin, self).apply(reduced, trainable_variables)

        return self._tfps_aggregation.apply(grads, variables, reduce, apply,
                                            lambda: self.iterations.assign_add(1))

    def _apply_aggregated_algorithm(self, grads, variables, keys, optimizer_step):
        # backward_passes_per_step > 1 with an algorithm: the gradients add up locally (no
        # reduction: what travels is the algorithm's business), and every N-th pass runs
        # one step of the algorithm on the sums (divided by N when averaging), as if the N
        # passes had been one larger batch. The passes between only count `iterations`.
        if not self.built:
            with tf.init_scope():
                self.build(variables)

        def apply(aggregated):
            return self._tfps_algorithm.run(optimizer_step, aggregated, variables, keys)

        return self._tfps_aggregation.apply(grads, variables, lambda summed: summed, apply,
                                            lambda: self.iterations.assign_add(1))


def _distributed_class(optimizer_class):
    return distributed_class(optimizer_class, _DistributedOptimizerMixin)


def _attach_plan(distributed, optimizer, plan, pins, compression):
    from tf_ps_ops.plan import auto, measure, update_probe

    plan = auto.plan_mode_from_environment() if plan is None else plan
    if plan is None:
        if pins:
            raise ValueError("plan_pins without plan=\"auto\" (or TFPS_PLAN=auto) pins nothing")
        return
    if plan != "auto":
        raise ValueError(f"plan={plan!r}: use \"auto\" or None")
    if compression is not Compression.none:
        raise ValueError(f"plan=\"auto\" picks the codecs itself: leave compression at "
                         f"Compression.none (got {compression!r}), or pin gradients with "
                         f"plan_pins")
    measured = measure.measure_cluster()  # collective: every worker, here
    if not is_tf_keras(optimizer):  # the worker's own update, which PS mode moves away
        measured = dataclasses.replace(measured, machine=dataclasses.replace(
            measured.machine, apply_per_byte=update_probe.optimizer_cost(optimizer)))
        distributed._tfps_plan_optimizer = optimizer  # its update of an embedding's rows
    distributed._tfps_plan = measured
    distributed._tfps_plan_pins = dict(pins or {})


def _why_not_ps(distributed, optimizer):
    """Why plan="auto" cannot give this optimizer's updates to the servers, or None."""
    from tf_ps_ops.plan import auto, cost
    from tf_ps_ops.ps.optimizers import local_only_features, server_step

    reasons = [
        (cost.PS_DENSE not in auto.allowed_modes(), "TFPS_PLAN_MODES leaves ps out"),
        (server_step(type(optimizer)) is None,
         f"the servers run Keras 3 SGD, Adam, Adagrad and RMSprop, not "
         f"{type(optimizer).__module__}.{type(optimizer).__name__}"),
        (local_only_features(optimizer), f"{local_only_features(optimizer)} would act on "
                                         f"the local copy only"),
        (distributed._tfps_algorithm is not None, "an algorithm decides what travels"),
        (distributed._tfps_aggregation is not None, "backward_passes_per_step > 1"),
        (distributed._tfps_op is not Average or distributed._tfps_predivide != 1.0,
         "the servers average the gradients (op=Average, no predivide factor)"),
        (distributed._tfps_process_set not in (None, global_process_set),
         "a process set other than the global one"),
    ]
    return next((why for bad, why in reasons if bad), None)


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average,
                         backward_passes_per_step=1, average_aggregated_gradients=False,
                         num_groups=0, groups=None, algorithm=None,
                         process_set=global_process_set, plan=None, plan_pins=None):
    """Returns a copy of a Keras optimizer that averages gradients over all workers.

    The result is an instance of a subclass of the optimizer's own class, created from
    `optimizer.get_config()`, so wrap the optimizer before training (its variables are
    not copied). Works under `model.fit`, `apply_gradients` and `apply`. Keras 3 and
    tf_keras (Keras 2: `tf_keras.optimizers.*` and `.legacy.*`, or `tf.keras` under
    TF_USE_LEGACY_KERAS=1) optimizers alike; for tf_keras, `apply_gradients` (which
    `fit` calls) reduces the gradients.

        opt = tf_ps_ops.DistributedOptimizer(keras.optimizers.SGD(0.01 * tf_ps_ops.size()))
        model.compile(optimizer=opt, loss=...)

    Keys are '<name>.' + each variable's path, so all workers must train the same model.

    Args:
      optimizer: a keras.optimizers.Optimizer or a tf_keras one.
      name: key prefix; defaults to 'Distributed' + the optimizer class name. The Keras
        optimizer keeps its own name, so its variables keep their paths.
      compression: Compression.none or Compression.fp16 (or a Compressor).
      sparse_as_dense: False (default), as in Horovod: a sparse gradient (a
        tf.IndexedSlices, from an Embedding layer or tf.gather) is allgathered, values and
        indices, so only the rows each worker touched travel, and the optimizer applies the
        gathered slices (their values averaged); compression, plan codecs and
        gradient_predivide_factor do not apply to it. True: it is made dense first and
        reduced like the other gradients (better when most rows are touched every step).
        With backward_passes_per_step > 1 sparse gradients are summed into dense buffers
        and reduced dense whatever this says.
      op: Average (default) or Sum.
      gradient_predivide_factor: with op=Average, divide by this before the sum and by
        size()/factor after it.
      device_dense: device for the reduction ops ('' lets TF place them).
      backward_passes_per_step: N > 1 adds the gradients up locally for N passes and
        reduces and applies them on the N-th only (Horovod's local gradient aggregation;
        between them only `iterations` counts).
      average_aggregated_gradients: with N > 1, divide the aggregated gradients by N.
      algorithm: a tf_ps_ops.algorithms.Algorithm (Decentralized, AsyncModelAverage, QAdam,
        ...) that decides what travels instead of the gradient average; pass
        `opt.algorithm_callbacks()` to `fit` (docs/algorithms.md). With
        backward_passes_per_step N > 1, the gradients add up locally and every N-th pass
        runs one algorithm step on the sums (its step counter counts those steps).
      process_set: average over that process set's members only
        (tf_ps_ops/collectives/process_sets.py).
      plan: "auto": the planner picks a codec per gradient (from those TFPS_PLAN_CODECS
        allows; default none) from the cluster's measurements, which every worker takes
        here, together; the plan table is logged on rank 0 at the first step
        (docs/plan.md). Default: TFPS_PLAN. Needs compression=Compression.none.
      plan_pins: {variable path or key: "sum" | "sum+int8" | ...}: choices the plan keeps.
      device_sparse: device for the gathers of sparse gradients ('' lets TF place them).
      num_groups, groups: accepted for Horovod compatibility; they do not change results
        here.
    """
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):  # horovod.tensorflow's, v1 graphs
        from tf_ps_ops.training.v1_optimizer import DistributedV1Optimizer
        if algorithm is not None:
            raise ValueError("algorithms need a Keras 3 optimizer")
        if plan is not None or plan_pins:
            raise ValueError("plan=\"auto\" needs a Keras optimizer (Keras 3 or tf_keras), "
                             "not a tf.compat.v1.train one")
        return DistributedV1Optimizer(
            optimizer, name, compression, check_gradient_options(op, gradient_predivide_factor),
            gradient_predivide_factor, device_dense, backward_passes_per_step,
            average_aggregated_gradients, sparse_as_dense, device_sparse)
    if is_tf_keras(optimizer):  # Keras 2: tf_keras.optimizers(.legacy), TF_USE_LEGACY_KERAS=1
        if algorithm is not None:
            raise ValueError(f"algorithm={type(algorithm).__name__}: algorithms need a Keras 3 "
                             f"optimizer; {type(optimizer).__name__} is a tf_keras one")
        cls = distributed_class(type(optimizer), TfKerasMixin)
    elif isinstance(optimizer, keras.optimizers.Optimizer):
        cls = _distributed_class(type(optimizer))
    else:
        raise TypeError(
            f"DistributedOptimizer wraps Keras 3 and tf_keras optimizers and "
            f"tf.compat.v1.train.Optimizer, got {type(optimizer).__name__} (module "
            f"{type(optimizer).__module__})")
    aggregation = LocalAggregation(backward_passes_per_step, average_aggregated_gradients)
    op = check_gradient_options(op, gradient_predivide_factor)
    distributed = cls.from_config(optimizer.get_config())
    distributed._tfps_key_prefix = name or f"Distributed{type(optimizer).__name__}"
    distributed._tfps_compression = compression
    distributed._tfps_op = op
    distributed._tfps_predivide = gradient_predivide_factor
    distributed._tfps_device = device_dense
    distributed._tfps_process_set = process_set
    distributed._tfps_sparse_as_dense = bool(sparse_as_dense)
    distributed._tfps_device_sparse = device_sparse
    if aggregation.passes > 1:
        distributed._tfps_aggregation = aggregation
    _attach_plan(distributed, optimizer, plan, plan_pins, compression)
    if algorithm is not None:
        if getattr(algorithm, "owns_step", False):
            algorithm.attach(distributed)
        distributed._tfps_algorithm = algorithm
        distributed._tfps_algorithm_state = algorithm.checkpoint_state  # checkpointed with it
    if distributed._tfps_plan is not None and not is_tf_keras(optimizer):
        from tf_ps_ops.ps.optimizers import server_step

        distributed._tfps_no_ps = _why_not_ps(distributed, optimizer)
        distributed._tfps_server_step = server_step(type(optimizer))
    return distributed


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=Compression.none, sparse_as_dense=False,
                                backward_passes_per_step=1, op=Average,
                                gradient_predivide_factor=1.0,
                                average_aggregated_gradients=False, groups=None,
                                process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """DistributedOptimizer whose `local_layers` (a Keras layer or a list) keep their own
    gradients, as Horovod's: those variables are trained on each worker's data alone.
    With `scale_local_gradients` their gradients are divided by size(). More variables can
    be made local with `register_local_var`. Broadcast with
    `BroadcastGlobalVariablesCallback(local_variables=...)` so they stay per worker."""
    ops._check_process_set(process_set)
    distributed = DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, groups=groups,
        process_set=process_set)
    distributed._tfps_local = LocalVariables(scale_local_gradients)
    distributed._tfps_local.register_layers(local_layers)
    return distributed


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none):
    """keras.models.load_model, with the saved optimizer (and its state) restored as a
    distributed one, as Horovod's load_model does. `custom_optimizers`: optimizer
    classes of your own that the file may name.

    A file saved by tf_keras (Keras 2: a SavedModel folder, or a .keras/.h5 file whose
    keras_version is 2.x) is loaded with tf_keras.models.load_model; its optimizer is
    then made distributed in place (a tf_keras file names built-in optimizers only by a
    lower-case name shared by the legacy and the new class, so they are not swapped
    while loading)."""
    if _saved_by_tf_keras(filepath):
        return _load_tf_keras_model(filepath, custom_optimizers, custom_objects, compression)
    classes = [cls for cls in vars(keras.optimizers).values()
               if isinstance(cls, type) and issubclass(cls, keras.optimizers.Optimizer)]
    objects = {cls.__name__: _distributed_class(cls)
               for cls in classes + list(custom_optimizers or [])}
    objects.update(custom_objects or {})
    model = keras.models.load_model(filepath, custom_objects=objects)
    if isinstance(getattr(model, "optimizer", None), _DistributedOptimizerMixin):
        model.optimizer._tfps_compression = compression
    return model


def _saved_by_tf_keras(filepath):
    """Whether tf_keras wrote `filepath` (else Keras 3 did)."""
    import json
    import os
    import zipfile

    path = os.fspath(filepath)
    if os.path.isdir(path):  # a SavedModel: Keras 3 neither writes nor loads one as a model
        return True
    version = None
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            if "metadata.json" in archive.namelist():
                version = json.loads(archive.read("metadata.json")).get("keras_version")
    elif path.endswith((".h5", ".hdf5")):
        import h5py
        with h5py.File(path, "r") as f:
            version = f.attrs.get("keras_version")
            version = version.decode() if isinstance(version, bytes) else version
    if version is None:  # unknown: the Keras that tf.keras is
        return tf_dot_keras_is_tf_keras()
    return str(version).startswith("2.")


def _load_tf_keras_model(filepath, custom_optimizers, custom_objects, compression):
    import tf_keras  # the file is a tf_keras one: the package is there or the load cannot be

    objects = {cls.__name__: cls for cls in custom_optimizers or []}
    objects.update(custom_objects or {})
    model = tf_keras.models.load_model(filepath, custom_objects=objects)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and not isinstance(optimizer, TfKerasMixin) and is_tf_keras(
            optimizer):
        # The distributed class only adds methods, so the loaded optimizer (its slots and
        # iterations restored) becomes one by changing its class.
        optimizer.__class__ = distributed_class(type(optimizer), TfKerasMixin)
    if isinstance(optimizer, TfKerasMixin):
        optimizer._tfps_compression = compression
    return model


# Horovod's Keras collectives take values and return tensors: (value, name, ...) order.
def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none, process_set=global_process_set):
    """Horovod Keras' allreduce: the average (default) or sum of `value` over workers."""
    return ops.allreduce(tf.convert_to_tensor(value), average=average,
                         compression=compression, op=op, prescale_factor=prescale_factor,
                         postscale_factor=postscale_factor, name=name,
                         process_set=process_set)


def allgather(value, name=None, process_set=global_process_set):
    """Horovod Keras' allgather: every worker's `value` concatenated on axis 0."""
    return ops.allgather(tf.convert_to_tensor(value), name=name, process_set=process_set)


def broadcast(value, root_rank, name=None, process_set=global_process_set):
    """Horovod Keras' broadcast: root_rank's `value` on every worker."""
    return ops.broadcast(tf.convert_to_tensor(value), root_rank, name=name,
                         process_set=process_set)


from tf_ps_ops.collectives.process_sets import ProcessSet  # noqa: E402,F401
from tf_ps_ops.collectives.register import (  # noqa: E402,F401
    add_process_set, remove_process_set)

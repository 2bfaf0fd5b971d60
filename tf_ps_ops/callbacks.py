"""Keras callbacks for distributed training (Horovod's `hvd.callbacks`).

Each is a Keras 3 callback that becomes a tf_keras (Keras 2) one when `fit` gives it a
tf_keras model (training/keras_callbacks.py): the same code serves both Keras.
"""

import inspect
import warnings

import tensorflow as tf

from tf_ps_ops.collectives.objects import broadcast_variables
from tf_ps_ops.collectives.ops import Average, allreduce
from tf_ps_ops.common.basics import size
from tf_ps_ops.training.keras_callbacks import FollowsTheModel, callback_class
from tf_ps_ops.training.keras_flavor import build_optimizer, optimizer_variables
from tf_ps_ops.training.metrics_callback import MetricsCallback


class BroadcastGlobalVariablesCallback(FollowsTheModel):
    """Copies root_rank's model and optimizer variables to every worker.

    When training begins on a built model, this builds the optimizer itself and
    broadcasts at once, so the very first step runs on identical weights and optimizer
    state. A model built by its first call (no `Input` layer, as in Horovod's Keras
    examples) has no variables yet: then, as Horovod does, the broadcast happens at the
    end of the first batch. Broadcasts once per instance.

    Args:
      root_rank: the worker whose values everyone takes.
      device: device for the broadcast ops ('' lets TF place them).
      local_variables: a variable or list of variables that stay as they are on each
        worker (Horovod's `local_variables`).

    With TFPS_AUTOTUNE=1 (`tfps-run --autotune`, Horovod's HOROVOD_AUTOTUNE) it also runs
    the autotuner (tf_ps_ops.plan.autotune.AutoTune) at the end of each training batch,
    as Horovod tunes with no change to the script.
    """

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        if local_variables is None:
            local_variables = []
        elif not isinstance(local_variables, (list, tuple, set)):
            local_variables = [local_variables]
        self._local = {id(var) for var in local_variables}
        self.broadcast_done = False
        from tf_ps_ops.plan import autotune

        self.autotune = autotune.from_environment()

    def _broadcast(self):
        optimizer = getattr(self.model, "optimizer", None)
        variables = list(self.model.variables)
        if optimizer is not None:
            variables += optimizer_variables(optimizer)
        variables = [var for var in variables if id(var) not in self._local]
        with tf.device(self.device):
            broadcast_variables(variables, self.root_rank)
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        if self.broadcast_done or not self.model.built or not self.model.variables:
            return
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None:
            build_optimizer(optimizer, self.model.trainable_variables)
        self._broadcast()

    def on_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast()
        if self.autotune is not None:
            self.autotune.on_train_batch_end(batch, logs)


class MetricAverageCallback(FollowsTheModel):
    """Replaces each epoch's metrics in `logs` by their average over all workers.

    Put it before callbacks that read the metrics (ModelCheckpoint, EarlyStopping,
    ReduceLROnPlateau, loggers) so that they all see, and decide on, the same values.
    Every worker must report the same metric names. `device` places the allreduce
    ('' lets TF place it).
    """

    def __init__(self, device=""):
        super().__init__()
        self.device = device

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        names = sorted(logs)
        # One push_pull for all metrics; float64 so averaging adds no rounding of its own.
        with tf.device(self.device):
            values = tf.constant([float(logs[name]) for name in names], tf.float64)
            averaged = allreduce(values, op=Average, name="MetricAverageCallback.logs").numpy()
        for name, value in zip(names, averaged):
            logs[name] = float(value)


class LearningRateScheduleCallback(FollowsTheModel):
    """Sets the learning rate to `initial_lr * multiplier(epoch)` (Horovod's callback).

    `multiplier` is a number, or a function of the epoch: with `staircase=True` it is
    called once per epoch with the integer epoch, otherwise before every batch with the
    fractional epoch (epoch + batch / steps_per_epoch). Applies in
    [start_epoch, end_epoch); `initial_lr` defaults to the optimizer's rate at the start.

    BytePS's form, `LearningRateScheduleCallback(multiplier, start_epoch=0, ...,
    initial_lr=None)`, works too: given one positional argument and no `multiplier`,
    that argument is the multiplier (Horovod requires both, so nothing is ambiguous).

    momentum_correction: as Horovod, momentum is scaled by new_lr / old_lr for the batch
    that follows each change, where the optimizer keeps momentum in a variable (tf_keras'
    legacy optimizers). Keras 3 and tf_keras' new optimizers fix `momentum` as a constant
    when the train step is traced, so it cannot change per batch: there it is not
    applied, and a warning says so.
    """

    def __init__(self, *args, **kwargs):
        super().__init__()
        # One positional argument and no `multiplier`: BytePS's order, multiplier first.
        byteps = len(args) == 1 and "multiplier" not in kwargs
        bound = _SCHEDULE_BYTEPS.bind(*args, **kwargs) if byteps else \
            _SCHEDULE_HOROVOD.bind(*args, **kwargs)
        bound.apply_defaults()
        self._init(**bound.arguments)

    def _init(self, initial_lr, multiplier, start_epoch, end_epoch, staircase,
              momentum_correction, steps_per_epoch):
        self.initial_lr = initial_lr
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)
        self.staircase = staircase if callable(multiplier) else True
        self.start_epoch, self.end_epoch = start_epoch, end_epoch
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = 0
        self._momentum = None  # the momentum variable, where momentum_correction applies
        self._restore_momentum = None

    def on_train_begin(self, logs=None):
        optimizer = self.model.optimizer
        if self.initial_lr is None:
            self.initial_lr = float(optimizer.learning_rate)
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self.params.get("steps")
            if not self.steps_per_epoch:
                raise ValueError("could not infer steps_per_epoch from fit(); pass "
                                 "steps_per_epoch to the learning rate callback")
        self._momentum = None
        if self.momentum_correction and getattr(optimizer, "momentum", 0):
            self._momentum = _momentum_variable(optimizer)
            if self._momentum is None:
                warnings.warn(f"momentum_correction is not applied: {type(optimizer).__name__} "
                              "fixes momentum when the train step is traced", stacklevel=2)

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        epoch = self.current_epoch
        if epoch < self.start_epoch or (self.end_epoch is not None and epoch >= self.end_epoch):
            return
        if self.staircase:
            if batch == 0:
                self._set_learning_rate(self.initial_lr * self.multiplier(epoch))
        else:
            fractional = epoch + batch / self.steps_per_epoch
            self._set_learning_rate(self.initial_lr * self.multiplier(fractional))

    def _set_learning_rate(self, new_lr):
        optimizer = self.model.optimizer
        if self._momentum is None:
            optimizer.learning_rate = new_lr
            return
        # Horovod's momentum correction: momentum * new_lr / old_lr for the next batch.
        old_lr = float(optimizer.learning_rate)
        optimizer.learning_rate = new_lr
        if old_lr:
            self._restore_momentum = float(self._momentum.numpy())
            self._momentum.assign(self._restore_momentum * new_lr / old_lr)

    def on_batch_end(self, batch, logs=None):
        if self._restore_momentum is not None:
            self._momentum.assign(self._restore_momentum)
            self._restore_momentum = None

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = float(self.model.optimizer.learning_rate)


def _schedule_signature(names):
    defaults = {"initial_lr": None, "multiplier": 1.0, "start_epoch": 0, "end_epoch": None,
                "staircase": True, "momentum_correction": True, "steps_per_epoch": None}
    return inspect.Signature([inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                default=defaults[name]) for name in names])


# Horovod: (initial_lr, multiplier, ...); BytePS: (multiplier, ..., initial_lr).
_SCHEDULE_HOROVOD = _schedule_signature(
    ["initial_lr", "multiplier", "start_epoch", "end_epoch", "staircase",
     "momentum_correction", "steps_per_epoch"])
_SCHEDULE_BYTEPS = _schedule_signature(
    ["multiplier", "start_epoch", "end_epoch", "staircase", "momentum_correction",
     "steps_per_epoch", "initial_lr"])
LearningRateScheduleCallback.__init__.__signature__ = _SCHEDULE_HOROVOD.replace(
    parameters=[inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    + list(_SCHEDULE_HOROVOD.parameters.values()))


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramps the learning rate from initial_lr / size() up to initial_lr over
    `warmup_epochs`, per batch (Horovod's warmup for a rate scaled by size())."""

    def __init__(self, initial_lr=None, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            # Shifted by one batch so that each epoch ends on a round value, as in Horovod.
            epoch += 1.0 / self.steps_per_epoch
            return 1.0 / size() * (epoch * (size() - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                  f"{float(self.model.optimizer.learning_rate):g}.")


class BestModelCheckpoint(FollowsTheModel):
    """Horovod's ModelCheckpoint that keeps only the best model; give it `filepath`
    (Horovod's Keras-2 version sets it later, from the `filepath` attribute)."""

    _tfps_base = "ModelCheckpoint"

    def __init__(self, monitor="val_loss", verbose=0, save_weights_only=False, mode="auto",
                 save_freq="epoch", filepath=None):
        if filepath is None:
            # Keras 3's ModelCheckpoint needs the path (and its suffix) at construction;
            # tf_keras reads the suffix too.
            filepath = "best.weights.h5" if save_weights_only else "best.keras"
        super().__init__(filepath=filepath, monitor=monitor, verbose=verbose,
                         save_best_only=True, save_weights_only=save_weights_only,
                         mode=mode, save_freq=save_freq)


def _momentum_variable(optimizer):
    """The variable that holds momentum, where the traced step reads one (tf_keras legacy
    optimizers keep hyper-parameters as variables); else None."""
    hyper = getattr(optimizer, "_hyper", None)
    if not isinstance(hyper, dict) or "momentum" not in hyper:
        return None
    variable = optimizer._get_hyper("momentum")  # makes the variable if not yet made
    return variable if isinstance(variable, tf.Variable) else None


# The Keras 3 classes, by their Horovod names (each turns tf_keras when given its model).
BroadcastGlobalVariablesCallback = callback_class(BroadcastGlobalVariablesCallback)
MetricAverageCallback = callback_class(MetricAverageCallback)
LearningRateScheduleCallback = callback_class(LearningRateScheduleCallback)
LearningRateWarmupCallback = callback_class(LearningRateWarmupCallback)
BestModelCheckpoint = callback_class(BestModelCheckpoint)
MetricsCallback = callback_class(MetricsCallback)

"""Keras 3 optimizers whose update step runs on the parameter servers (PS mode).

Drop-in for `keras.optimizers.SGD/Adam/Adagrad/RMSprop`: same constructor arguments, same
math. Keras 3 optimizers emit no ApplyXXX ops for a graph rewrite to swap, so these
classes call the PsApplyXXX op from `update_step`: push the gradient, the servers average
the workers' gradients and apply the update once, the variable receives the result. The
first step of a variable copies rank 0's value to the servers and to every worker.

`build()` (which `fit` calls before the first step; call it yourself before a custom
loop) makes every worker adopt rank 0's initial weights, so all replicas start equal.
The slot variables Keras creates (momentums, velocities, ...) stay at their initial
values: in PS mode the slots live on the servers. `weight_decay` and `use_ema` would act on
the local copy only and are refused.

Sparse gradients (`tf.IndexedSlices`, from embeddings): plain SGD and Adagrad send only the
touched rows (PsSparseApply ops; the servers update only the rows some worker touched, which
is Keras's math for them: an untouched row would not change). SGD with momentum, Adam and
RMSprop densify them: Keras 3 decays their slots on every row each step, so a row-only
update (TF's ResourceSparseApplyKerasMomentum semantics) would train differently.
"""

import keras
import tensorflow as tf

from tf_ps_ops.common.library import ops as _ops
from tf_ps_ops.ps.ps_mode import _deferred_to_elastic_run, _remember, ps_key
from tf_ps_ops.ps.sparse_tables import note_sparse_table


def _key(optimizer, variable):
    # update_step may get the backend's tf.Variable rather than the keras.Variable; the
    # optimizer's own list has the Keras one, whose path ("sequential/dense/kernel") is
    # identical on every worker.
    keras_variable = optimizer._trainable_variables[optimizer._get_variable_index(variable)]
    return ps_key(keras_variable.path)


def _check_local_only_features(optimizer):
    if optimizer.weight_decay:
        raise ValueError(f"{type(optimizer).__name__}: weight_decay is applied locally by Keras "
                         "and would be lost in PS mode; add it to the loss instead")
    if optimizer.use_ema:
        raise ValueError(f"{type(optimizer).__name__}: use_ema is not supported in PS mode")


class _PsMixin:
    """Shared set-up: refuses the features that would act on the local copy only."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _check_local_only_features(self)

    def build(self, variables):
        variables = list(variables)
        if any(not isinstance(getattr(v, "path", None), str) for v in variables):
            name = type(self).__name__
            raise TypeError(f"tf_ps_ops.optimizers.{name} is a Keras 3 optimizer and got "
                            f"variables without a Keras 3 path (a tf_keras model?); for "
                            f"tf_keras models use tf_ps_ops.optimizers.tf_keras.{name}")
        super().build(variables)
        init_on_servers(variables, [ps_key(v.path) for v in variables])


def _cast(value, variable):
    return tf.cast(value, variable.dtype)


def _dense(gradient):
    # Adam and RMSprop: Keras updates their slots on every row, so rows would not do.
    return tf.convert_to_tensor(gradient)


def _sparse(gradient):
    return isinstance(gradient, tf.IndexedSlices)


def sgd_step(opt, gradient, variable, learning_rate, key):
    """keras.optimizers.SGD's update of `variable`, run by the servers under `key`."""
    lr = _cast(learning_rate, variable)
    if _sparse(gradient) and opt.momentum == 0:
        note_sparse_table(variable, key)
        _ops().ps_sparse_apply_gradient_descent(
            var=variable.handle, alpha=lr, grad=_cast(gradient.values, variable),
            indices=gradient.indices, tensor_name=key)
        return
    grad = _cast(_dense(gradient), variable)
    if opt.momentum != 0:
        m = opt.momentums[opt._get_variable_index(variable)]
        _ops().ps_apply_keras_momentum(
            var=variable.handle, accum=m.handle, lr=lr, grad=grad,
            momentum=_cast(opt.momentum, variable), use_nesterov=opt.nesterov, tensor_name=key)
    else:
        _ops().ps_apply_gradient_descent(var=variable.handle, alpha=lr, delta=grad,
                                         tensor_name=key)


def adam_step(opt, gradient, variable, learning_rate, key):
    """keras.optimizers.Adam's update of `variable`, run by the servers under `key`."""
    step = _cast(opt.iterations + 1, variable)
    beta_1 = _cast(opt.beta_1, variable)
    beta_2 = _cast(opt.beta_2, variable)
    index = opt._get_variable_index(variable)
    args = dict(var=variable.handle, m=opt._momentums[index].handle,
                v=opt._velocities[index].handle, beta1_power=tf.pow(beta_1, step),
                beta2_power=tf.pow(beta_2, step), lr=_cast(learning_rate, variable),
                beta1=beta_1, beta2=beta_2, epsilon=_cast(opt.epsilon, variable),
                grad=_cast(_dense(gradient), variable), tensor_name=key)
    if opt.amsgrad:
        _ops().ps_apply_adam_with_amsgrad(vhat=opt._velocity_hats[index].handle, **args)
    else:
        _ops().ps_apply_adam(**args)


def adagrad_step(opt, gradient, variable, learning_rate, key):
    """keras.optimizers.Adagrad's update of `variable`, run by the servers under `key`."""
    accumulator = opt._accumulators[opt._get_variable_index(variable)]
    common = dict(var=variable.handle, accum=accumulator.handle,
                  lr=_cast(learning_rate, variable), epsilon=_cast(opt.epsilon, variable),
                  tensor_name=key)
    if _sparse(gradient):
        note_sparse_table(variable, common["tensor_name"])
        _ops().ps_sparse_apply_keras_adagrad(grad=_cast(gradient.values, variable),
                                             indices=gradient.indices, **common)
    else:
        _ops().ps_apply_keras_adagrad(grad=_cast(_dense(gradient), variable), **common)


def rmsprop_step(opt, gradient, variable, learning_rate, key):
    """keras.optimizers.RMSprop's update of `variable`, run by the servers under `key`."""
    index = opt._get_variable_index(variable)
    ms = opt._velocities[index]
    # With momentum 0 Keras keeps no momentum slot; the server keeps its own (it only
    # reads the local one's initial value, 0, like the velocity's), so ms stands in.
    mom = opt._momentums[index] if opt.momentum > 0 else ms
    args = dict(var=variable.handle, ms=ms.handle, mom=mom.handle,
                lr=_cast(learning_rate, variable), rho=_cast(opt.rho, variable),
                momentum=_cast(opt.momentum, variable), epsilon=_cast(opt.epsilon, variable),
                grad=_cast(_dense(gradient), variable), tensor_name=key)
    if opt.centered:
        _ops().ps_apply_centered_rms_prop(mg=opt._average_gradients[index].handle, **args)
    else:
        _ops().ps_apply_rms_prop(**args)


# The Keras 3 optimizers whose update the servers can run, by class (exactly: a subclass
# may change update_step).
SERVER_STEPS = {keras.optimizers.SGD: sgd_step, keras.optimizers.Adam: adam_step,
                keras.optimizers.Adagrad: adagrad_step, keras.optimizers.RMSprop: rmsprop_step}


def server_step(optimizer_class):
    """The update the servers can run for a Keras 3 optimizer of `optimizer_class`, or
    None."""
    return SERVER_STEPS.get(optimizer_class)


def local_only_features(optimizer):
    """The optimizer's settings that act on the local copy only (PS mode would lose
    them), as text, or None."""
    found = [name for name in ("weight_decay", "use_ema", "clipnorm", "clipvalue",
                               "global_clipnorm")
             if getattr(optimizer, name, None)]
    if (getattr(optimizer, "gradient_accumulation_steps", None) or 1) > 1:
        found.append("gradient_accumulation_steps")
    return ", ".join(found) or None


def init_on_servers(variables, keys):
    """Every worker adopts rank 0's values of `variables`, which the servers now hold
    under `keys` (a collective; under a traced step it runs at trace time)."""
    with tf.init_scope():  # also when Keras builds inside a traced train step
        deferred = _deferred_to_elastic_run()
        for variable, key in zip(variables, keys):
            _remember(variable, key)
            if not deferred:
                _ops().ps_init_variable(variable.value.handle, tensor_name=key)


class SGD(_PsMixin, keras.optimizers.SGD):
    def update_step(self, gradient, variable, learning_rate):
        sgd_step(self, gradient, variable, learning_rate, _key(self, variable))


class Adam(_PsMixin, keras.optimizers.Adam):
    def update_step(self, gradient, variable, learning_rate):
        adam_step(self, gradient, variable, learning_rate, _key(self, variable))


class Adagrad(_PsMixin, keras.optimizers.Adagrad):
    def update_step(self, gradient, variable, learning_rate):
        adagrad_step(self, gradient, variable, learning_rate, _key(self, variable))


class RMSprop(_PsMixin, keras.optimizers.RMSprop):
    def update_step(self, gradient, variable, learning_rate):
        rmsprop_step(self, gradient, variable, learning_rate, _key(self, variable))

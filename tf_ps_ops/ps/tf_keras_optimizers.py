"""tf_keras (Keras 2) optimizers whose update step runs on the parameter servers (PS mode):
`tf_ps_ops.optimizers.tf_keras.SGD/Adam/Adagrad/RMSprop`, drop-ins for
`tf_keras.optimizers.SGD/Adam/Adagrad/RMSprop` (under TF_USE_LEGACY_KERAS=1,
`tf.keras.optimizers.*`). The same design as the Keras 3 ones (ps/optimizers.py): each
`update_step` calls a PsApplyXXX op, the servers average the workers' gradients and apply
the update once; `build()` makes every worker adopt rank 0's initial weights. The update
math is TensorFlow's ApplyXXX, which is tf_keras' own for these four.

tf_keras' legacy optimizers (`tf_keras.optimizers.legacy.*`) need none of this: they emit
ResourceApplyXXX ops, which the graph rewrite swaps (ps_mode.enable_graph_rewrite).

Keys: the variable's name, as the graph rewrite and `ps_mode.push_variables` name it, so
that `push_variables(model.variables)` after a restore reaches the same parameters.

This module imports tf_keras; `tf_ps_ops.optimizers.tf_keras` loads it on first use.
"""

import tensorflow as tf
import tf_keras

from tf_ps_ops.common.library import ops as _ops
from tf_ps_ops.ps.ps_mode import (_deferred_to_elastic_run, _name_variable, _remember,
                                  key_for)
from tf_ps_ops.ps.sparse_tables import note_sparse_table


class _PsMixin:
    """Shared set-up: refuses features that would act on the local copy only; no XLA
    (the PS ops have no XLA kernel; tf_keras turns it on where a GPU is)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        name = type(self).__name__
        if self.weight_decay:
            raise ValueError(f"{name}: weight_decay is applied locally by tf_keras and "
                             "would be lost in PS mode; add it to the loss instead")
        if self.use_ema:
            raise ValueError(f"{name}: use_ema is not supported in PS mode")
        if getattr(self, "adaptive_epsilon", False):
            raise ValueError(f"{name}: adaptive_epsilon is not supported in PS mode (the "
                             "servers apply TensorFlow's Adam, epsilon as given)")
        self.jit_compile = False
        self.__dict__["_tfps_keys"] = {}  # not tracked: no checkpoint state

    def build(self, var_list):
        super().build(var_list)
        with tf.init_scope():  # also when tf_keras builds inside a traced train step
            deferred = _deferred_to_elastic_run()
            for variable in var_list:
                var_key = self._var_key(variable)
                if var_key in self._tfps_keys:
                    continue
                _name_variable(variable)
                key = self._tfps_keys[var_key] = key_for(variable.handle)
                _remember(variable, key)
                if not deferred:
                    _ops().ps_init_variable(variable.handle, tensor_name=key)

    def _slot(self, slots, variable):
        return slots[self._index_dict[self._var_key(variable)]]

    def _key(self, variable):
        return self._tfps_keys[self._var_key(variable)]

    @staticmethod
    def _cast(value, variable):
        return tf.cast(value, variable.dtype)

    @staticmethod
    def _dense(gradient):
        return tf.convert_to_tensor(gradient)


class SGD(_PsMixin, tf_keras.optimizers.SGD):
    def update_step(self, gradient, variable):
        lr = self._cast(self.learning_rate, variable)
        key = self._key(variable)
        if isinstance(gradient, tf.IndexedSlices) and self.momentum == 0:
            note_sparse_table(variable, key)
            _ops().ps_sparse_apply_gradient_descent(
                var=variable.handle, alpha=lr, grad=self._cast(gradient.values, variable),
                indices=gradient.indices, tensor_name=key)
            return
        grad = self._cast(self._dense(gradient), variable)
        if self.momentum != 0:
            _ops().ps_apply_keras_momentum(
                var=variable.handle, accum=self._slot(self.momentums, variable).handle, lr=lr,
                grad=grad, momentum=self._cast(self.momentum, variable),
                use_nesterov=self.nesterov, tensor_name=key)
        else:
            _ops().ps_apply_gradient_descent(var=variable.handle, alpha=lr, delta=grad,
                                             tensor_name=key)


class Adam(_PsMixin, tf_keras.optimizers.Adam):
    def update_step(self, gradient, variable):
        step = self._cast(self.iterations + 1, variable)
        beta_1 = self._cast(self.beta_1, variable)
        beta_2 = self._cast(self.beta_2, variable)
        args = dict(var=variable.handle, m=self._slot(self._momentums, variable).handle,
                    v=self._slot(self._velocities, variable).handle,
                    beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step),
                    lr=self._cast(self.learning_rate, variable), beta1=beta_1, beta2=beta_2,
                    epsilon=self._cast(self.epsilon, variable),
                    grad=self._cast(self._dense(gradient), variable),
                    tensor_name=self._key(variable))
        if self.amsgrad:
            _ops().ps_apply_adam_with_amsgrad(
                vhat=self._slot(self._velocity_hats, variable).handle, **args)
        else:
            _ops().ps_apply_adam(**args)


class Adagrad(_PsMixin, tf_keras.optimizers.Adagrad):
    def update_step(self, gradient, variable):
        accumulator = self._slot(self._accumulators, variable)
        lr = self._cast(self.learning_rate, variable)
        epsilon = self._cast(self.epsilon, variable)
        if isinstance(gradient, tf.IndexedSlices):
            note_sparse_table(variable, self._key(variable))
            _ops().ps_sparse_apply_keras_adagrad(
                var=variable.handle, accum=accumulator.handle, lr=lr, epsilon=epsilon,
                grad=self._cast(gradient.values, variable), indices=gradient.indices,
                tensor_name=self._key(variable))
            return
        _ops().ps_apply_keras_adagrad(
            var=variable.handle, accum=accumulator.handle, lr=lr, epsilon=epsilon,
            grad=self._cast(self._dense(gradient), variable), tensor_name=self._key(variable))


class RMSprop(_PsMixin, tf_keras.optimizers.RMSprop):
    def update_step(self, gradient, variable):
        ms = self._slot(self._velocities, variable)
        # With momentum 0 tf_keras keeps no momentum slot; the server keeps its own (it
        # only reads the local one's initial value, 0, like the velocity's): ms stands in.
        mom = self._slot(self._momentums, variable) if self.momentum > 0 else ms
        args = dict(var=variable.handle, ms=ms.handle, mom=mom.handle,
                    lr=self._cast(self.learning_rate, variable),
                    rho=self._cast(self.rho, variable),
                    momentum=self._cast(self.momentum, variable),
                    epsilon=self._cast(self.epsilon, variable),
                    grad=self._cast(self._dense(gradient), variable),
                    tensor_name=self._key(variable))
        if self.centered:
            _ops().ps_apply_centered_rms_prop(
                mg=self._slot(self._average_gradients, variable).handle, **args)
        else:
            _ops().ps_apply_rms_prop(**args)

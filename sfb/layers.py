"""sfb.Dense: keras.layers.Dense whose kernel gradient travels as sufficient factors;
`tf_keras_dense()`: the same for tf_keras (Keras 2) models."""

import functools

import keras
import tensorflow as tf

import tf_ps_ops
from sfb.ops import sfb_matmul

# Set on a kernel variable (the Keras variable and the tf.Variable under it) whose gradient
# arrives already averaged over workers. tf_ps_ops' DistributedOptimizer and
# DistributedGradientTape read it by name, without importing this package.
SFB_ATTRIBUTE = "_tfps_sfb"


def is_sfb_variable(variable):
    """True for a kernel whose gradient sfb.Dense exchanges itself: the optimizer and the
    tape must not push_pull it again."""
    return bool(getattr(variable, SFB_ATTRIBUTE, False))


def _mark(variable):
    setattr(variable, SFB_ATTRIBUTE, True)
    inner = getattr(variable, "_value", None)  # the tf.Variable of a Keras 3 variable
    if inner is not None:
        setattr(inner, SFB_ATTRIBUTE, True)


_keys_taken = {}


def _unique_key(path):
    """'sfb.<variable path>', with '#n' for the n-th later kernel of the same path (a
    cloned model keeps its layer names): workers build their models in the same order,
    so they agree on the keys, and two exchanges in one step never share one."""
    base = "sfb." + path
    count = _keys_taken.get(base, 0)
    _keys_taken[base] = count + 1
    return base if count == 0 else f"{base}#{count}"


def _resource_handle(variable):
    # Not `variable.handle`: inside a mixed-precision layer `.value` is an autocast tensor.
    inner = getattr(variable, "_value", None)
    return (variable if inner is None else inner).handle


@keras.saving.register_keras_serializable(package="sfb")
class Dense(keras.layers.Dense):
    """A drop-in for keras.layers.Dense (same arguments, weights and config) whose kernel
    gradient is exchanged between workers as sufficient factors (u = ∂L/∂y, v = x) and
    rebuilt, averaged and bit-identical, on every worker. The bias is an ordinary variable
    that the DistributedOptimizer / DistributedGradientTape reduces as usual.

    Train it with tf_ps_ops.DistributedOptimizer or DistributedGradientTape: they skip
    the kernel, whose gradient is already averaged. Before tf_ps_ops.init() (a single
    process) the layer is exactly keras.layers.Dense. Inputs of rank > 2 are allowed: each
    position is a factor row, which makes SFB expensive (see sfb.policy).
    """

    def build(self, input_shape):
        super().build(input_shape)
        if self.quantization_mode is None:
            _mark(self._kernel)
            self._sfb_key = _unique_key(self._kernel.path)

    def _exchanges_factors(self):
        # A LoRA or quantized layer trains other variables (unmarked, reduced as usual).
        return (tf_ps_ops.is_initialized() and self.quantization_mode is None
                and not self.lora_enabled and self._kernel.trainable and self.trainable)

    def call(self, inputs, training=None):
        if not self._exchanges_factors():
            return super().call(inputs, training=training)
        if isinstance(inputs, tf.SparseTensor):  # factors are dense rows
            inputs = tf.sparse.to_dense(inputs)
        x = sfb_matmul(inputs, self.kernel, _resource_handle(self._kernel), self._sfb_key)
        if self.bias is not None:
            x = tf.add(x, self.bias)
        if self.activation is not None:
            x = self.activation(x)
        return x


@functools.cache
def tf_keras_dense():
    """sfb.Dense for tf_keras (Keras 2) models: a tf_keras.layers.Dense whose kernel
    gradient is the factor exchange. Made on first use (tf_keras is optional); sfb.convert
    uses it for tf_keras models."""
    import tf_keras

    @tf_keras.saving.register_keras_serializable(package="sfb")
    class Dense(tf_keras.layers.Dense):
        __doc__ = tf_keras_dense.__doc__

        def build(self, input_shape):
            super().build(input_shape)
            _mark(self.kernel)
            self._sfb_key = _unique_key(self.kernel.name.split(":")[0])

        def call(self, inputs):
            if not (tf_ps_ops.is_initialized() and self.trainable):
                return super().call(inputs)
            if isinstance(inputs, tf.SparseTensor):
                inputs = tf.sparse.to_dense(inputs)
            if inputs.dtype.base_dtype != self._compute_dtype_object.base_dtype:
                inputs = tf.cast(inputs, self._compute_dtype_object)
            x = sfb_matmul(inputs, self.kernel, _resource_handle(self.kernel), self._sfb_key)
            if self.use_bias:
                x = tf.nn.bias_add(x, self.bias)
            if self.activation is not None:
                x = self.activation(x)
            return x

    Dense.__module__ = __name__
    Dense.__qualname__ = "tf_keras_dense.<locals>.Dense"
    return Dense

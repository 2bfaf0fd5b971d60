"""Keras 3 (`keras`) or Keras 2 (the `tf_keras` package): which one an object belongs to.

With TF_USE_LEGACY_KERAS=1, `tf.keras` is tf_keras; a program can also import tf_keras
itself while `tf.keras` is Keras 3. The two have different model, optimizer and callback
classes, so the glue asks each object which it is. tf_keras is an optional extra: this
module never imports it; an object of it exists only once the program has.
"""

import sys


def is_tf_keras(obj):
    """True for a tf_keras object or class (a model, layer, optimizer, callback), including
    the program's own subclasses of tf_keras classes."""
    cls = obj if isinstance(obj, type) else type(obj)
    return any(base.__module__.partition(".")[0] == "tf_keras" for base in cls.__mro__)


def tf_keras_module():
    """The tf_keras package, imported by the program already (None when it was not)."""
    return sys.modules.get("tf_keras")


def tf_dot_keras_is_tf_keras():
    """Whether `tf.keras` is tf_keras (TF_USE_LEGACY_KERAS=1), without importing either."""
    module = tf_keras_module()
    if module is None:
        return False
    tf = sys.modules.get("tensorflow")
    try:
        return getattr(getattr(tf, "keras", None), "__name__", "").startswith("tf_keras")
    except ImportError:  # tf.keras resolves lazily: tf_keras asked for and not installed
        return False


def optimizer_variables(optimizer):
    """The optimizer's variables: a property in Keras 3 and tf_keras' optimizers, a method
    in tf_keras' legacy ones; [] while a tf_keras optimizer is not built."""
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


def optimizer_built(optimizer):
    """Whether the optimizer made its slot variables (True when it does not say)."""
    if hasattr(optimizer, "_create_all_weights"):  # tf_keras legacy (OptimizerV2)
        return bool(optimizer._weights)
    built = getattr(optimizer, "built", None)  # Keras 3
    if built is None:
        built = getattr(optimizer, "_built", None)  # tf_keras (absent until built)
        if built is None and is_tf_keras(optimizer):
            return False
    return True if built is None else bool(built)


def build_optimizer(optimizer, variables):
    """Creates the optimizer's slot variables for `variables` unless it has them."""
    if hasattr(optimizer, "_create_all_weights"):  # tf_keras legacy: idempotent per variable
        optimizer._create_all_weights(list(variables))
    elif not optimizer_built(optimizer):
        optimizer.build(list(variables))

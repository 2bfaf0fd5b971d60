"""Keras optimizers whose update runs on the servers (tf_ps_ops/ps/optimizers.py;
docs/ps_mode.md). `tf_ps_ops.optimizers.tf_keras` holds the same four for tf_keras
(Keras 2) models (tf_ps_ops/ps/tf_keras_optimizers.py), loaded on first use so that
tf_keras stays optional."""

from tf_ps_ops.ps.optimizers import SGD, Adagrad, Adam, RMSprop  # noqa: F401
from tf_ps_ops.ps.ps_mode import ps_key  # noqa: F401  (offered here before the move)

__all__ = ["SGD", "Adagrad", "Adam", "RMSprop"]


def __getattr__(name):
    if name == "tf_keras":
        from tf_ps_ops.ps import tf_keras_optimizers
        return tf_keras_optimizers
    raise AttributeError(f"module 'tf_ps_ops.optimizers' has no attribute {name!r}")

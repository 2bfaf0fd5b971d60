"""Keras optimizers whose update runs on the servers (tf_ps_ops/ps/optimizers.py;
docs/ps_mode.md)."""

from tf_ps_ops.ps.optimizers import SGD, Adagrad, Adam, RMSprop  # noqa: F401
from tf_ps_ops.ps.ps_mode import ps_key  # noqa: F401  (offered here before the move)

__all__ = ["SGD", "Adagrad", "Adam", "RMSprop"]

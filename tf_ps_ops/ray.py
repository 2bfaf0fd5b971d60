"""Ray integration, as horovod.ray: `from tf_ps_ops.ray import RayExecutor`
(tf_ps_ops/runner/ray.py)."""

from tf_ps_ops.runner.ray import RayExecutor  # noqa: F401

__all__ = ["RayExecutor"]

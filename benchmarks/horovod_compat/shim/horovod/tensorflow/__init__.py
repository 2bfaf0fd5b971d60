"""`import horovod.tensorflow as hvd` for running Horovod's own tests against tf_ps_ops:
only a re-export of tf_ps_ops.tensorflow, which lays out Horovod's module name for name."""

import sys

import tf_ps_ops.tensorflow as _tfps
from tf_ps_ops.tensorflow import *  # noqa: F401,F403

sys.modules[__name__ + ".util"] = _tfps.util
sys.modules[__name__ + ".keras"] = _tfps.keras


def __getattr__(name):  # names beyond the star import (underscored helpers, UNSERVED, ...)
    return getattr(_tfps, name)

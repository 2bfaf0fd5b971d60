"""`import horovod.keras as hvd` (Horovod's standalone-Keras module): tf_ps_ops.keras serves
both it and `horovod.tensorflow.keras`, so this only re-exports it."""

import tf_ps_ops.keras as _keras
from tf_ps_ops.keras import *  # noqa: F401,F403


def __getattr__(name):  # names beyond the star import
    return getattr(_keras, name)

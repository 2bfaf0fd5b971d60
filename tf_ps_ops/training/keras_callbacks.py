"""Callbacks for both Keras: one class of logic, and per Keras a subclass that adds that
Keras' own base class (`callbacks.Callback`, `callbacks.ModelCheckpoint`).

tf_keras' `fit` calls private methods of tf_keras.callbacks.Callback on every callback, so
a Keras 3 callback is refused there (and the reverse). The public classes are the Keras 3
ones, as before; `fit` hands each callback its model first (`set_model`), and a callback
given a model of the other Keras turns into its twin for that Keras, made afresh from the
arguments it was constructed with. So the same line works under either Keras:

    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]   # then fit()

Nothing here imports tf_keras unless a tf_keras model reached a callback.
"""

import functools

from tf_ps_ops.training.keras_flavor import is_tf_keras


def _keras(tf_keras):
    if tf_keras:
        import tf_keras as module  # a tf_keras model exists, so the package is there
    else:
        import keras as module
    return module


@functools.cache
def callback_class(logic, tf_keras=False):
    """`logic` (a subclass of FollowsTheModel) on the Callback base of one Keras."""
    base = getattr(_keras(tf_keras).callbacks, logic._tfps_base)
    return type(logic.__name__, (logic, base),
                {"__module__": logic.__module__, "__qualname__": logic.__qualname__,
                 "__doc__": logic.__doc__, "_tfps_logic": logic, "_tfps_tf_keras": tf_keras})


class FollowsTheModel:
    """Base of the logic classes: records the constructor arguments, and swaps the
    instance to the other Keras' twin when `fit` gives it a model of that Keras."""

    _tfps_base = "Callback"  # the name of the Keras class the logic sits on
    _tfps_logic = None  # set on the classes callback_class makes
    _tfps_tf_keras = False

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        self._tfps_arguments = (args, kwargs)
        return self

    def set_model(self, model):
        cls = type(self)
        wanted = is_tf_keras(model)
        # A program's own subclass is left as it is: its twin would lose its methods.
        if cls._tfps_logic is not None and cls.__dict__.get("_tfps_logic") is not None \
                and wanted != cls._tfps_tf_keras:
            twin = callback_class(cls._tfps_logic, wanted)
            fresh = object.__new__(twin)
            args, kwargs = self._tfps_arguments
            fresh._tfps_arguments = self._tfps_arguments
            twin.__init__(fresh, *args, **kwargs)
            self.__class__ = twin
            self.__dict__ = fresh.__dict__
        super().set_model(model)

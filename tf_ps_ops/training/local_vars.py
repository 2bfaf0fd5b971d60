"""Worker-local variables (Horovod's register_local_var / register_local_source and the
Partial* wrappers): their gradients are not reduced over workers. With
`scale_local_gradients` (Horovod's default) a local gradient is divided by size(), as
Horovod does so that local and averaged gradients keep the same scale under a learning
rate scaled by size().
"""

import tensorflow as tf

from tf_ps_ops.common.basics import size


class LocalVariables:
    """The variables registered as local, by identity and (Keras 3) by path."""

    def __init__(self, scale_local_gradients=True):
        self._ids, self._paths = set(), set()
        self.scale = bool(scale_local_gradients)

    def register(self, variable):
        self._ids.add(id(variable))
        path = getattr(variable, "path", None)
        if isinstance(path, str):
            self._paths.add(path)

    def register_layers(self, layers):
        """Every weight of `layers` (a Keras layer or a list of them)."""
        if layers is None:
            return
        for layer in layers if isinstance(layers, (list, tuple)) else [layers]:
            if not hasattr(layer, "weights"):
                raise TypeError(f"local_layers must be Keras layers, got {type(layer).__name__}")
            for variable in layer.weights:
                self.register(variable)

    def __contains__(self, variable):
        return id(variable) in self._ids or getattr(variable, "path", None) in self._paths

    def __bool__(self):
        return bool(self._ids)

    def reduce(self, grads, keys, variables, reduce):
        """`reduce(grads, keys, variables)` for the shared variables; local ones keep
        their own gradient (divided by size() when scaling)."""
        variables = list(variables)
        out = reduce_all_but(grads, keys, variables, lambda v: v in self, reduce)
        if self.scale:
            for i, v in enumerate(variables):
                if v in self and out[i] is not None:
                    out[i] = _divide(out[i], size())
        return out


def reduce_all_but(grads, keys, variables, kept, reduce):
    """`reduce(grads, keys, variables)` of the gradients whose variable is not `kept(v)`;
    the others come back as they are, in their places."""
    shared = [i for i, v in enumerate(variables) if not kept(v)]
    out = list(grads)
    for i, g in zip(shared, reduce([grads[i] for i in shared], [keys[i] for i in shared],
                                   [variables[i] for i in shared])):
        out[i] = g
    return out


def _divide(grad, n):
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / tf.cast(n, grad.values.dtype), grad.indices,
                                grad.dense_shape)
    return grad / tf.cast(n, grad.dtype)

"""Local gradient aggregation (Horovod's `backward_passes_per_step`): gradients add up on
each worker for N backward passes; only the N-th pass reduces them over workers.

As Horovod's LocalGradientAggregationHelper does:
  - every pass adds its gradients to per-variable sums kept on the worker;
  - on passes 1..N-1 the tape's gradient() returns the sums so far (not reduced) and the
    Keras optimizer does not update the variables (it only counts `iterations`);
  - on pass N the sums are reduced over workers (one push_pull per variable), divided by
    N when `average_aggregated_gradients`, returned / applied, and reset.
Eagerly the choice is a Python `if`; in a tf.function a tf.cond, so one trace serves
every pass. Every worker must call the same number of passes.
"""

import numbers

import tensorflow as tf


class LocalAggregation:
    """The sums and the pass counter of one tape or optimizer."""

    def __init__(self, backward_passes_per_step, average_aggregated_gradients):
        if isinstance(backward_passes_per_step, bool) or not isinstance(
                backward_passes_per_step, numbers.Integral) or backward_passes_per_step < 1:
            raise ValueError(f"backward_passes_per_step must be an integer >= 1, got "
                             f"{backward_passes_per_step!r}")
        self.passes = int(backward_passes_per_step)
        self.average = bool(average_aggregated_gradients)
        self.counter = None
        self.sums = None

    def _build(self, grads, variables):
        with tf.init_scope():  # once, also when the first pass is being traced
            self.counter = tf.Variable(0, dtype=tf.int64, trainable=False,
                                       name="tfps_backward_passes")
            self.sums = [None if grad is None else tf.Variable(
                tf.zeros(_shape(grad, variable), grad.dtype), trainable=False,
                name="tfps_aggregated_gradient")
                for grad, variable in zip(grads, variables)]

    def add(self, grads, variables):
        """Adds this pass's gradients; returns (the sums so far, is this pass N?)."""
        grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]
        if self.sums is None:
            self._build(grads, variables)
        if len(grads) != len(self.sums) or any(
                (g is None) != (s is None) for g, s in zip(grads, self.sums)):
            raise ValueError("backward_passes_per_step > 1: every pass must produce gradients "
                             "for the same variables (the same ones None)")
        summed = [None if s is None else s.assign_add(g)
                  for g, s in zip(grads, self.sums)]
        summed = [None if s is None else tf.identity(s) for s in summed]
        count = self.counter.assign_add(1)
        return summed, tf.equal(count, self.passes)

    def finish(self, summed, reduce):
        """Pass N: the reduced sums (divided by N when averaging); the sums restart."""
        reduced = reduce(summed)
        if self.average:
            reduced = [None if g is None else g / tf.cast(self.passes, g.dtype)
                       for g in reduced]
        with tf.control_dependencies([g for g in reduced if g is not None]):
            resets = [s.assign(tf.zeros_like(s)) for s in self.sums if s is not None]
            resets.append(self.counter.assign(0))
        with tf.control_dependencies(resets):
            return [None if g is None else tf.identity(g) for g in reduced]

    def gradients(self, grads, variables, reduce):
        """The tape's gradient(): the local sums, or on pass N their reduction."""
        summed, last = self.add(grads, variables)
        if tf.executing_eagerly():
            return self.finish(summed, reduce) if bool(last) else summed
        present = [i for i, g in enumerate(summed) if g is not None]

        def reduced():
            out = self.finish(summed, reduce)
            return [out[i] for i in present]

        chosen = tf.cond(last, reduced, lambda: [summed[i] for i in present])
        result = list(summed)
        for i, value in zip(present, chosen if isinstance(chosen, list) else [chosen]):
            result[i] = value
        return result

    def apply(self, grads, variables, reduce, apply, skip):
        """The optimizer's step: on pass N apply(reduced sums), otherwise skip()."""
        summed, last = self.add(grads, variables)
        if tf.executing_eagerly():
            if bool(last):
                return apply(self.finish(summed, reduce))
            return skip()

        def on_last():
            apply(self.finish(summed, reduce))
            return tf.constant(True)

        def otherwise():
            skip()
            return tf.constant(False)

        return tf.cond(last, on_last, otherwise)


def _shape(grad, variable):
    if grad.shape.is_fully_defined():
        return grad.shape
    if variable is not None:
        return variable.shape
    raise ValueError("backward_passes_per_step > 1 needs gradients of a known shape")

"""The algorithm interface, and GradientAllReduce (the summation path through the servers).

An algorithm sees one training step through three hooks, all called with the gradients
already computed on this worker's batch (at the weights x_k):

  before_step(grads, variables) -> grads   what the optimizer gets; may also change the
                                           weights (a decentralized average of x_k)
  step(apply, grads, variables)            the optimizer step; `apply` is the user's
                                           optimizer's own (QAdam replaces it)
  after_step(variables)                    after the update (nothing here yet)

Which tensors travel where is the algorithm's business: gradients to the servers
(GradientAllReduce, warm-ups), weights to neighbours (Decentralized), weights to the
servers from a background thread (AsyncModelAverage), momenta to the servers (QAdam).
Every hook runs inside `fit`'s tf.function as well as eagerly; all workers run the same
hooks at the same step, so the collectives inside them meet.
"""

import tensorflow as tf

from tf_ps_ops.collectives.compression import Compression


class Algorithm:
    """Base class: no communication at all (each worker trains alone)."""

    #: QAdam-like algorithms replace the optimizer's update; they need DistributedOptimizer.
    owns_step = False

    def __init__(self):
        self._built = False
        self._keys = None
        self._step_var = None
        # What a checkpoint of this algorithm holds (step counter, build()'s state), as
        # attributes of one trackable; DistributedOptimizer tracks it, so
        # tf.train.Checkpoint(optimizer=opt) saves and restores it (also before build:
        # deferred restoration fills the variables when build() attaches them).
        self._state = tf.Module(name=f"{type(self).__name__}_state")

    # -- called by DistributedOptimizer / DistributedGradientTape -------------------------

    def run(self, apply, grads, variables, keys):
        """One step: the three hooks in order. `apply(grads, variables)` is the user's
        optimizer's update (None for the tape, whose user applies it)."""
        self.ensure_built(variables, keys)
        grads = self.before_step(list(grads), variables)
        result = self.step(apply, grads, variables) if apply is not None else grads
        self.after_step(variables)
        self._step_var.assign_add(1)
        return result

    def ensure_built(self, variables, keys):
        if self._built:
            if len(keys) != len(self._keys):
                raise ValueError(f"{type(self).__name__} was built for {len(self._keys)} "
                                 f"variables and now gets {len(keys)}: use one algorithm "
                                 "object per model")
            return
        with tf.init_scope():  # also when Keras first calls apply inside a traced step
            self._step_var = tf.Variable(0, dtype=tf.int64, trainable=False,
                                         name=f"{type(self).__name__}_step")
            self._keys = list(keys)
            self._state.step = self._step_var
            self.build(variables)
        self._built = True

    @property
    def checkpoint_state(self):
        """A trackable of this algorithm's state (the step counter; LowPrecisionDecentralized's
        public copies; QAdam's m and v) for tf.train.Checkpoint(algorithm=...) when the
        optimizer is not checkpointed (DistributedGradientTape)."""
        return self._state

    @property
    def step_count(self):
        """Steps this algorithm has run on this worker (a tf.Variable, int64)."""
        return self._step_var

    # -- the hooks ---------------------------------------------------------------------

    def build(self, variables):
        """Creates per-variable state (runs once, eagerly)."""

    def before_step(self, grads, variables):
        return grads

    def step(self, apply, grads, variables):
        return apply(grads, variables)

    def after_step(self, variables):
        pass

    def callbacks(self):
        """Keras callbacks the algorithm needs under `fit` (AsyncModelAverage's)."""
        return []

    def stop(self):
        """Ends background work (AsyncModelAverage); safe to call more than once."""


class GradientAllReduce(Algorithm):
    """Today's path: gradients averaged over all workers through the servers (summation
    mode), then the user's optimizer. `compression`: a Compression (docs/compression.md)."""

    def __init__(self, compression=Compression.none):
        super().__init__()
        self.compression = compression

    def before_step(self, grads, variables):
        from tf_ps_ops.collectives.ops import Average
        from tf_ps_ops.training.tape import reduce_gradients

        return reduce_gradients(grads, self._keys, self.compression, Average,
                                variables=variables)

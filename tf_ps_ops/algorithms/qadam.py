"""QAdam (Bagua; Tang et al., "1-bit Adam", ICML'21): Adam whose communication drops to a
compressed momentum after a full-precision warm-up (docs/algorithms.md).

  steps 1..warmup:  g = average of the workers' gradients (float32, through the servers);
                    m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2   (exact Adam)
  later steps:      v stays as the warm-up left it (frozen), d = sqrt(v_hat) + eps;
                    m = d * average over workers of C((b1 m + (1-b1) g_local) / d)
                    (int8 by default: the servers decode, sum in float32, re-encode)
  update:           x -= lr * m_hat / (sqrt(v_hat) + eps), m_hat = m / (1 - b1^t),
                    v_hat = v / (1 - b2^min(t, warmup))

Every worker gets the same averaged m and has the same frozen v, so replicas that start
equal stay equal. Use it with DistributedOptimizer(keras.optimizers.Adam(...),
algorithm=QAdam(...)): it takes learning_rate, beta_1, beta_2 and epsilon from that Adam.
"""

import keras
import tensorflow as tf

from tf_ps_ops.algorithms.base import Algorithm
from tf_ps_ops.collectives.compression import Compression


class QAdam(Algorithm):
    """Args:
      warmup_steps: steps of exact Adam on averaged float32 gradients (at least 1: the
        frozen second moment comes from them).
      compression: how the momentum travels after warm-up (a Compression; int8 default).
    """

    owns_step = True

    def __init__(self, warmup_steps=100, compression=Compression.int8, v_floor=0.01):
        super().__init__()
        self.v_floor = float(v_floor)
        if not isinstance(warmup_steps, int) or warmup_steps < 1:
            raise ValueError(f"warmup_steps={warmup_steps!r}: at least 1 step of exact Adam "
                             "is needed to estimate the second moment QAdam freezes")
        self.warmup_steps = warmup_steps
        self.compression = compression
        self.optimizer = None

    def attach(self, optimizer):
        if not isinstance(optimizer, keras.optimizers.Adam) or optimizer.amsgrad:
            raise TypeError("QAdam runs Adam's update itself: wrap a keras.optimizers.Adam "
                            f"(without amsgrad), got {type(optimizer).__name__}")
        if optimizer.weight_decay or optimizer.use_ema:
            raise ValueError("QAdam does not apply weight_decay or use_ema; add weight decay "
                             "to the loss instead")
        self.optimizer = optimizer

    def build(self, variables):
        self.m = [tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False, name="qadam_m")
                  for v in variables]
        self.v = [tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False, name="qadam_v")
                  for v in variables]
        self._state.m = self.m
        self._state.v = self.v

    def _denominator(self, v, t=None):
        """sqrt(v_hat) + eps, v_hat bias-corrected for the steps v was updated."""
        b2 = float(self.optimizer.beta_2)
        v_steps = float(self.warmup_steps) if t is None else tf.minimum(t, float(self.warmup_steps))
        v_hat = v.read_value() / (1 - tf.pow(b2, v_steps))
        # Once v is frozen: a coordinate that saw (almost) no gradient during warm-up has
        # v ~ 0, and a gradient arriving later would step by m / eps. Adam would grow v with
        # it; with v frozen, a floor (a fraction of its tensor's mean) stands in for that.
        floored = tf.maximum(v_hat, self.v_floor * tf.reduce_mean(v_hat))
        v_hat = floored if t is None else tf.where(t > self.warmup_steps, floored, v_hat)
        return tf.sqrt(v_hat) + self.optimizer.epsilon

    def step(self, apply, grads, variables):
        from tf_ps_ops.collectives.ops import Average
        from tf_ps_ops.training.tape import reduce_gradients

        opt = self.optimizer
        if opt is None:
            raise ValueError("QAdam needs DistributedOptimizer(keras.optimizers.Adam(...), "
                             "algorithm=QAdam(...)); it cannot run from a gradient tape")
        if not opt.built:
            opt.build(variables)
        step = self._step_var.read_value()
        t = tf.cast(step + 1, tf.float32)
        b1, b2 = float(opt.beta_1), float(opt.beta_2)
        # A variable without a gradient this step (unused) decays its momentum, as in Adam.
        local = [tf.zeros(v.shape, tf.float32) if g is None else
                 tf.cast(tf.convert_to_tensor(g), tf.float32) for g, v in zip(grads, variables)]

        def warmup():
            averaged = reduce_gradients(local, [k + ".grad" for k in self._keys],
                                        Compression.none, Average, variables=variables)
            for m, v, g in zip(self.m, self.v, averaged):
                m.assign(b1 * m + (1 - b1) * g)
                v.assign(b2 * v + (1 - b2) * tf.square(g))
            return tf.constant(True)

        def compressed():
            # What travels is the momentum divided by the frozen denominator d (the same on
            # every worker, so the average commutes with it): the codec's error is then
            # relative to the step sizes. Sent as m itself, int8's error on a coordinate
            # whose v is ~0 (a unit with no gradient during warm-up) becomes error / eps.
            denominators = [self._denominator(v) for v in self.v]
            steps = [(b1 * m + (1 - b1) * g) / d
                     for m, g, d in zip(self.m, local, denominators)]
            averaged = reduce_gradients(steps, [k + ".momentum" for k in self._keys],
                                        self.compression, Average, variables=variables)
            for m, value, d in zip(self.m, averaged, denominators):
                m.assign(value * d)
            return tf.constant(False)

        with tf.control_dependencies([tf.cond(step < self.warmup_steps, warmup, compressed)]):
            lr = tf.cast(opt.learning_rate, tf.float32)
            updates = []
            for variable, m, v in zip(variables, self.m, self.v):
                m_hat = m.read_value() / (1 - tf.pow(b1, t))
                delta = lr * m_hat / self._denominator(v, t)
                updates.append(variable.assign_sub(tf.cast(delta, variable.dtype)))
        with tf.control_dependencies(updates):
            return opt.iterations.assign_add(1)

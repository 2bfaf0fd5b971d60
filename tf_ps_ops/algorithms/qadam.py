"""QAdam (Bagua; Tang et al., "1-bit Adam", ICML'21): Adam whose communication drops to a
compressed momentum after a full-precision warm-up (docs/algorithms.md).

  steps 1..warmup:  g = average of the workers' gradients (float32, through the servers);
                    m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2   (exact Adam)
  later steps:      m = average over workers of C(b1 m + (1-b1) g_local)   (int8 by default;
                    the servers decode, sum in float32 and re-encode)
                    v stays as the warm-up left it (frozen)
  update:           x -= lr * m_hat / (sqrt(v_hat) + eps), m_hat = m / (1 - b1^t),
                    v_hat = v / (1 - b2^min(t, warmup))

Every worker gets the same averaged m and has the same frozen v, so replicas that start
equal stay equal. Use it with DistributedOptimizer(keras.optimizers.Adam(...),
algorithm=QAdam(...)): it takes learning_rate, beta_1, beta_2 and epsilon from that Adam.
"""

import keras
import tensorflow as tf

from tf_ps_ops.algorithms.base import Algorithm
from tf_ps_ops.compression import Compression


class QAdam(Algorithm):
    """Args:
      warmup_steps: steps of exact Adam on averaged float32 gradients (at least 1: the
        frozen second moment comes from them).
      compression: how the momentum travels after warm-up (a Compression; int8 default).
    """

    owns_step = True

    def __init__(self, warmup_steps=100, compression=Compression.int8):
        super().__init__()
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

    def step(self, apply, grads, variables):
        from tf_ps_ops.ops import Average
        from tf_ps_ops.tape import reduce_gradients

        opt = self.optimizer
        if opt is None:
            raise ValueError("QAdam needs DistributedOptimizer(keras.optimizers.Adam(...), "
                             "algorithm=QAdam(...)); it cannot run from a gradient tape")
        if not opt.built:
            opt.build(variables)
        step = self._step_var.read_value()
        t = tf.cast(step + 1, tf.float32)
        b1, b2 = float(opt.beta_1), float(opt.beta_2)
        local = [tf.cast(tf.convert_to_tensor(g), tf.float32) for g in grads]

        def warmup():
            averaged = reduce_gradients(local, [k + ".grad" for k in self._keys],
                                        Compression.none, Average, variables=variables)
            for m, v, g in zip(self.m, self.v, averaged):
                m.assign(b1 * m + (1 - b1) * g)
                v.assign(b2 * v + (1 - b2) * tf.square(g))
            return tf.constant(True)

        def compressed():
            momenta = [b1 * m + (1 - b1) * g for m, g in zip(self.m, local)]
            averaged = reduce_gradients(momenta, [k + ".momentum" for k in self._keys],
                                        self.compression, Average, variables=variables)
            for m, value in zip(self.m, averaged):
                m.assign(value)
            return tf.constant(False)

        with tf.control_dependencies([tf.cond(step < self.warmup_steps, warmup, compressed)]):
            lr = tf.cast(opt.learning_rate, tf.float32)
            v_steps = tf.minimum(t, float(self.warmup_steps))
            updates = []
            for variable, m, v in zip(variables, self.m, self.v):
                m_hat = m.read_value() / (1 - tf.pow(b1, t))
                v_hat = v.read_value() / (1 - tf.pow(b2, v_steps))
                delta = lr * m_hat / (tf.sqrt(v_hat) + opt.epsilon)
                updates.append(variable.assign_sub(tf.cast(delta, variable.dtype)))
        with tf.control_dependencies(updates):
            return opt.iterations.assign_add(1)

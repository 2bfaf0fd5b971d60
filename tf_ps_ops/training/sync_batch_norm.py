"""SyncBatchNormalization: Keras batch normalization whose batch statistics cover every
worker's batch (Horovod's `hvd.SyncBatchNormalization`)."""

import keras
import tensorflow as tf

from tf_ps_ops.collectives.ops import Sum, allreduce


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """keras.layers.BatchNormalization with the mean and variance of a training batch
    taken over all workers' batches together, as if they were one batch.

    Each worker sums its count, sum and sum of squares per feature; one allreduce (Sum)
    adds them up, in float32 for float16/bfloat16 inputs. The key is the layer's path,
    so every worker must build the same model. Gradients flow through the reduction.
    Inference (training=False) uses the moving statistics, as the plain layer does.
    """

    def _moments(self, inputs, mask):
        if mask is not None:
            raise NotImplementedError("SyncBatchNormalization does not support masks")
        axes = list(self._reduction_axes)
        wide = tf.float32 if inputs.dtype in (tf.float16, tf.bfloat16) else inputs.dtype
        x = tf.cast(inputs, wide)
        count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), wide)
        local = tf.concat([tf.reshape(count, [1]), tf.reduce_sum(x, axes),
                           tf.reduce_sum(tf.square(x), axes)], axis=0)
        total = allreduce(local, op=Sum, name=f"SyncBatchNormalization.{self.path}")
        features = (tf.shape(total)[0] - 1) // 2
        mean = total[1:1 + features] / total[0]
        variance = tf.maximum(total[1 + features:] / total[0] - tf.square(mean), 0.0)
        return tf.cast(mean, inputs.dtype), tf.cast(variance, inputs.dtype)

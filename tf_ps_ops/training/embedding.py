"""keras.layers.Embedding whose lookup reads only the rows it needs.

Keras 3's Embedding (TensorFlow backend) looks rows up with `ops.take` on the whole table:
a dense read of the variable. Once the table has had a sparse update (plain SGD or
Adagrad on its tf.IndexedSlices gradient, here or on the servers in PS mode), TensorFlow
keeps the variable in copy-on-read mode, and every dense read copies the whole table. A
2 M × 64 table (512 MB) costs about half a second per step on one core that way, against
about a millisecond for the rows. This layer looks the rows up through the variable
itself (`tf.nn.embedding_lookup`, TensorFlow's ResourceGather), as tf_keras's Embedding
does: same arguments, weights, gradient (a tf.IndexedSlices) and output.
"""

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="tf_ps_ops")
class Embedding(keras.layers.Embedding):
    """Drop-in for `keras.layers.Embedding` (Keras 3) whose lookup does not copy the table.
    LoRA and quantized layers take Keras's own path (their table is computed, not read)."""

    def call(self, inputs):
        if getattr(self, "lora_enabled", False) or getattr(self, "quantization_mode", None):
            return super().call(inputs)
        if inputs.dtype not in ("int32", "int64"):
            inputs = tf.cast(inputs, "int32")
        # The backend's tf.Variable: keras.Variable.value may autocast, a dense read.
        table = getattr(self._embeddings, "_value", self._embeddings)
        outputs = tf.nn.embedding_lookup(table, inputs)
        return tf.cast(outputs, self.compute_dtype)

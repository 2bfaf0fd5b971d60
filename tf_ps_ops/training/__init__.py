"""Training glue over the collectives: the gradient tape, local gradient aggregation,
local variables, the tf.compat.v1 optimizer and synchronous batch normalisation. The Keras
optimizer wrapper is in tf_ps_ops/keras.py (Horovod's module layout); what it shares with
tf_keras (Keras 2) support is here: keras_flavor.py, keras_optimizer.py, keras_callbacks.py.
"""

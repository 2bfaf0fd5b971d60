"""The models, data and training step every mode of benchmarks/train_worker.py shares:
mlp, cnn and their tiny_ versions built here (the zoo's in zoo_models.py), one fixed
synthetic batch per worker, Keras 3 SGD (lr 0.01, momentum 0.9 unless the zoo sets its
own) and the step: forward, loss, GradientTape, optimizer.apply.
"""

import zoo_models

MODELS = ("mlp", "cnn", "tiny_mlp", "tiny_cnn") + zoo_models.MODELS
LR, MOMENTUM = 0.01, 0.9


def build_model(name):
    import keras
    from keras import layers

    if name in zoo_models.MODELS:
        return zoo_models.build(name)
    keras.utils.set_random_seed(0)  # every rank builds the same initial weights
    if name in ("mlp", "tiny_mlp"):
        width = 4096 if name == "mlp" else 256
        return keras.Sequential([keras.Input((784,)),
                                 layers.Dense(width, activation="relu", name="fc1"),
                                 layers.Dense(width, activation="relu", name="fc2"),
                                 layers.Dense(width, activation="relu", name="fc3"),
                                 layers.Dense(10, name="logits")], name=name)
    c1, c2, fc = (32, 64, 128) if name == "cnn" else (8, 16, 32)
    return keras.Sequential([keras.Input((28, 28, 1)),
                             layers.Conv2D(c1, 3, activation="relu", name="conv1"),
                             layers.Conv2D(c2, 3, activation="relu", name="conv2"),
                             layers.MaxPooling2D(2, name="pool"),
                             layers.Flatten(name="flatten"),
                             layers.Dense(fc, activation="relu", name="fc1"),
                             layers.Dense(10, name="logits")], name=name)


def input_shape(model_name):
    return (784,) if model_name.endswith("mlp") else (28, 28, 1)


def make_batch(model_name, batch, seed):
    import numpy as np

    if model_name in zoo_models.MODELS:
        return zoo_models.make_batch(model_name, batch, seed)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, *input_shape(model_name))).astype(np.float32)
    y = rng.integers(0, 10, size=(batch,)).astype(np.int32)
    return x, y


def momentum(model_name):
    return zoo_models.MOMENTUM.get(model_name, MOMENTUM)


def sgd(model_name):
    import keras
    return keras.optimizers.SGD(LR, momentum=momentum(model_name))


def constants(batch):
    """The batch as tf.constant tensors (x may be a tuple: the DLRM's two inputs)."""
    import tensorflow as tf
    return tf.nest.map_structure(tf.constant, batch)


def loss_fn():
    import keras
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def make_step(model, optimizer, loss, scale=1.0, wrap_tape=None):
    """The step every mode runs; `scale` makes a cross-replica SUM an average (TF
    strategies), `wrap_tape` turns the tape into a distributed one (Horovod)."""
    import tensorflow as tf

    def step(x, y):
        with tf.GradientTape() as tape:
            value = loss(y, model(x, training=True)) * scale
        sources = model.trainable_variables
        if wrap_tape is not None:
            tape = wrap_tape(tape)
            sources = [v.value for v in sources]  # Horovod's tape wants tf.Variables
        grads = tape.gradient(value, sources)
        optimizer.apply(grads, model.trainable_variables)
        return value
    return step

"""The digits MLP written as a Horovod Keras-2 script: tf.keras is tf_keras.

    python3 -m tf_ps_ops.run -np 2 -ns 1 python3 examples/train_digits_tf_keras.py

TensorFlow >= 2.16 ships Keras 3 as tf.keras; with TF_USE_LEGACY_KERAS=1 (set below,
before TensorFlow is imported, as Horovod users do) tf.keras is the tf_keras package, the
Keras 2 API that Horovod's Keras integration and examples are written for. The script is
such an example with one changed import: `tf_ps_ops.keras` stands in for
`horovod.tensorflow.keras`. Needs `pip install tf_keras` (the same version as TensorFlow).
"""

import argparse
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # before TensorFlow is imported

import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import tf_ps_ops.keras as hvd  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--warmup-epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def load_shard(rank, size, seed):
    """This worker's share of the training split (equal shards: every worker runs the same
    number of steps), and the whole held-out split."""
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32")
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, random_state=seed, stratify=y)
    n = len(x_train) // size
    return (x_train[rank::size][:n], y_train[rank::size][:n]), (x_test, y_test)


def main():
    args = parse_args()
    if not tf.keras.__name__.startswith("tf_keras"):
        raise SystemExit(f"tf.keras is {tf.keras.__name__}, not tf_keras: install tf_keras, "
                         "and import TensorFlow only after TF_USE_LEGACY_KERAS=1 is set")
    tf.config.threading.set_intra_op_parallelism_threads(1)  # workers share the cores
    tf.config.threading.set_inter_op_parallelism_threads(2)

    hvd.init()
    (x_train, y_train), (x_test, y_test) = load_shard(hvd.rank(), hvd.size(), args.seed)
    tf.keras.utils.set_random_seed(args.seed + hvd.rank())  # the broadcast evens them out

    model = tf.keras.Sequential([
        tf.keras.layers.Dense(128, activation="relu", input_shape=(64,)),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    # Horovod's recipe: the learning rate scaled by the number of workers, reached after
    # a warmup; the gradients averaged over the workers by the wrapped optimizer.
    scaled_lr = 0.01 * hvd.size()
    opt = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(scaled_lr, momentum=0.9))
    model.compile(optimizer=opt,
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),  # rank 0's initial weights
        hvd.callbacks.MetricAverageCallback(),  # the printed metrics: the workers' mean
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr,
                                                 warmup_epochs=args.warmup_epochs),
    ]
    model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs,
              callbacks=callbacks, verbose=2 if hvd.rank() == 0 else 0)

    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    if hvd.rank() == 0:
        print(f"held-out: loss {loss:.4f}, accuracy {accuracy:.4f} "
              f"({len(x_test)} samples, {hvd.size()} workers)")
    hvd.shutdown()


if __name__ == "__main__":
    main()

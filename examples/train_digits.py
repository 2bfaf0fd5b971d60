"""Data-parallel training of a small MLP on scikit-learn's digits, one shard per worker.

    make demo
    # which runs: python3 -m tf_ps_ops.run -np 2 -ns 2 python3 examples/train_digits.py

The data set ships with scikit-learn (nothing is downloaded). The script is a Horovod
script with one changed import: `tf_ps_ops` stands in for `horovod.tensorflow.keras`.
"""

import argparse

import keras
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import tf_ps_ops as hvd


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def load_shard(rank, size, seed):
    """This worker's share of the training split, and the whole held-out split."""
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32")  # pixels are 0..16
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, random_state=seed, stratify=y)
    # Equal shards: in BSP every worker must run the same number of steps, or the
    # last step of the longer shards waits for gradients that never come.
    n = len(x_train) // size
    return (x_train[rank::size][:n], y_train[rank::size][:n]), (x_test, y_test)


def build_model():
    return keras.Sequential([
        keras.Input(shape=(64,)),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])


def train(epochs=5, batch_size=32, seed=0):
    """Trains on this worker's shard; returns the held-out (loss, accuracy) of rank 0's
    replica (every replica holds the same weights). Needs hvd.init() first."""
    rank, size = hvd.rank(), hvd.size()
    (x_train, y_train), (x_test, y_test) = load_shard(rank, size, seed)

    keras.utils.set_random_seed(seed + rank)  # differing starts: the broadcast must fix them
    model = build_model()
    # Gradients are averaged over the workers: scale the step size with their number,
    # as Horovod's examples do, so the effective batch of size*batch_size learns as fast.
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * size, momentum=0.9))
    model.compile(optimizer=opt,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"],
                  jit_compile=False)  # our ops have no XLA kernels
    model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs,
              callbacks=[
                  # Every replica starts from rank 0's weights...
                  hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                  # ...and the per-epoch loss/accuracy printed is the mean over workers.
                  hvd.callbacks.MetricAverageCallback(),
              ],
              verbose=2 if rank == 0 else 0)

    loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
    if rank == 0:
        print(f"held-out: loss {loss:.4f}, accuracy {accuracy:.4f} "
              f"({len(x_test)} samples, {size} workers)")
    return loss, accuracy


def main():
    args = parse_args()
    # Workers share the machine's cores: one compute thread each avoids contention.
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)

    hvd.init()
    train(args.epochs, args.batch_size, args.seed)
    hvd.shutdown()


if __name__ == "__main__":
    main()

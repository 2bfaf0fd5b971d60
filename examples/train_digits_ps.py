"""The digits MLP of train_digits.py in PS mode: the servers hold the optimizer's state and
apply the update; workers push gradients and pull the new weights (docs/ps_mode.md).

    tfps-run -np 2 -ns 2 python3 examples/train_digits_ps.py               # Keras 3, fit
    tfps-run -np 2 -ns 2 python3 examples/train_digits_ps.py --api v1      # graph rewrite

--api keras: `tf_ps_ops.optimizers.SGD` stands in for `keras.optimizers.SGD` (same
arguments); its update step runs on the servers. --api v1: a tf.compat.v1.train optimizer,
unchanged, whose ResourceApplyMomentum ops the graph rewrite (TFPS_GRAPH_REWRITE=1, or
`enable_graph_rewrite()` as here) turns into PsApplyMomentum.
"""

import argparse
import os
import sys

import keras
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_digits import build_model, load_shard  # noqa: E402

import tf_ps_ops as hvd  # noqa: E402
from tf_ps_ops import optimizers, ps_mode  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--api", choices=["keras", "v1"], default="keras")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def accuracy_of(model, x, y):
    predicted = tf.argmax(model(x, training=False), axis=1)
    return float(tf.reduce_mean(tf.cast(tf.equal(predicted, tf.cast(y, tf.int64)),
                                        tf.float32)))


def train_keras(model, data, args):
    """fit() with a server-side optimizer: building it (fit does, before the first step)
    makes every worker adopt rank 0's weights, so no broadcast callback is needed."""
    (x_train, y_train), _ = data
    model.compile(optimizer=optimizers.SGD(0.01 * hvd.size(), momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=False)
    model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs,
              callbacks=[hvd.callbacks.MetricAverageCallback()],
              verbose=2 if hvd.rank() == 0 else 0)


def train_v1(model, data, args):
    """A custom loop over a tf.compat.v1 optimizer. v1 optimizers update tf.Variables (not
    Keras 3 variables; a tf_keras model's would do as they are), so this loop trains
    tf.Variable copies of the model's weights and writes them back at the end.
    initialize_variables gives every worker rank 0's values (the servers keep the first
    value they receive) before the first step; the rewrite must be on before the update
    ops are traced."""
    (x_train, y_train), _ = data
    weights = [tf.Variable(w.numpy(), name="digits_" + w.path.replace("/", "_"))
               for w in model.trainable_variables]
    ps_mode.initialize_variables(weights)
    ps_mode.enable_graph_rewrite()
    optimizer = tf.compat.v1.train.MomentumOptimizer(0.01 * hvd.size(), momentum=0.9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    dataset = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
               .shuffle(len(x_train), seed=args.seed + hvd.rank())
               .batch(args.batch_size, drop_remainder=True))

    def forward(x):  # build_model()'s layers: Dense(relu), Dense(relu), Dense
        for i in range(0, len(weights) - 2, 2):
            x = tf.nn.relu(tf.matmul(x, weights[i]) + weights[i + 1])
        return tf.matmul(x, weights[-2]) + weights[-1]

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, forward(x))
        grads = tape.gradient(loss, weights)
        # The server averages the workers' gradients and applies the momentum step.
        optimizer.apply_gradients(zip(grads, weights))
        return loss

    for epoch in range(args.epochs):
        losses = [train_step(x, y) for x, y in dataset]
        mean_loss = hvd.allreduce(tf.reduce_mean(losses), name="epoch_loss")
        if hvd.rank() == 0:
            print(f"epoch {epoch + 1}/{args.epochs}: loss {float(mean_loss):.4f}")
    for variable, trained in zip(model.trainable_variables, weights):
        variable.assign(trained)


def main():
    args = parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)

    hvd.init()
    data = load_shard(hvd.rank(), hvd.size(), args.seed)
    keras.utils.set_random_seed(args.seed + hvd.rank())  # differing starts, made equal
    model = build_model()
    (train_keras if args.api == "keras" else train_v1)(model, data, args)

    x_test, y_test = data[1]
    if hvd.rank() == 0:
        print(f"held-out: accuracy {accuracy_of(model, x_test, y_test):.4f} "
              f"({len(x_test)} samples, {hvd.size()} workers, PS mode, --api {args.api})")
    hvd.shutdown()


if __name__ == "__main__":
    main()

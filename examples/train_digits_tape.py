"""The digits MLP of train_digits.py in a custom training loop: DistributedGradientTape
averages the gradients over the workers, optionally compressed on the wire.

    tfps-run -np 2 -ns 1 python3 examples/train_digits_tape.py
    tfps-run -np 2 -ns 1 python3 examples/train_digits_tape.py --compression int8

--compression takes what TFPS_COMPRESSION takes: none, fp16, bf16, int8, onebit, topk:R,
randomk:R (docs/compression.md). The script is Horovod's TensorFlow 2 example pattern with
one changed import: broadcast the initial state, then average every step's gradients.
"""

import argparse
import os
import sys

import keras
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_digits import build_model, load_shard  # noqa: E402

import tf_ps_ops as hvd  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--compression", default="none")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def main():
    args = parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    compression = hvd.Compression.parse(args.compression)
    (x_train, y_train), (x_test, y_test) = load_shard(rank, size, args.seed)
    # Every shard has the same length and drop_remainder keeps the step counts equal: in
    # BSP each worker must run as many steps as the others.
    dataset = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
               .shuffle(len(x_train), seed=args.seed + rank)
               .batch(args.batch_size, drop_remainder=True))

    keras.utils.set_random_seed(args.seed + rank)
    model = build_model()
    optimizer = keras.optimizers.SGD(0.01 * size, momentum=0.9)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # Every replica starts from rank 0's weights and optimizer state.
    hvd.broadcast_variables(model.variables + optimizer.variables, root_rank=0)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for epoch in range(args.epochs):
        losses = [train_step(x, y) for x, y in dataset]
        mean_loss = hvd.allreduce(tf.reduce_mean(losses), name="epoch_loss")
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs}: loss {float(mean_loss):.4f} "
                  f"(mean over {size} workers)")

    logits = model(x_test, training=False)
    accuracy = float(tf.reduce_mean(tf.cast(
        tf.equal(tf.argmax(logits, axis=1), tf.cast(y_test, tf.int64)), tf.float32)))
    if rank == 0:
        print(f"held-out: accuracy {accuracy:.4f} ({len(x_test)} samples, {size} workers, "
              f"compression {args.compression})")
    hvd.shutdown()


if __name__ == "__main__":
    main()

"""One worker of the compression convergence run (benchmarks/compression_convergence.py and
tests/multiprocess/test_compression_convergence.py): trains the same MLP on scikit-learn's
digits once per compression setting, from the same initial weights and the same data order,
and prints one JSON line per setting (rank 0): held-out accuracy after every epoch, the
final training loss and the bytes the engine sent.

Every setting pushes its gradients under its own names, so no error-feedback memory or step
count carries over from one setting to the next. The gradients are averaged with
`tf_ps_ops.push_pull(..., compression=...)` (summation mode, the servers re-encode the sum)
and applied by a plain Keras SGD with momentum on every worker.
"""

import argparse
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import tf_ps_ops as hvd
from tf_ps_ops.common import library as _library


def settings():
    """name -> compressor; the order of the runs (and of the curves)."""
    C = hvd.Compression
    return {
        "none": C.uncompressed,
        "fp16": C.fp16,
        "bf16": C.bf16,
        "int8": C.int8,
        "onebit": C.onebit.with_error_feedback(True),
        "onebit-noef": C.onebit.with_error_feedback(False),
        "topk:0.01": C.topk(0.01).with_error_feedback(True),
        "topk:0.01-noef": C.topk(0.01).with_error_feedback(False),
        # PS mode (tf_ps_ops.optimizers.SGD: the servers average and apply); its gradient
        # pushes take the job default, so run the job with TFPS_COMPRESSION=int8.
        "ps:job-default": None,
    }


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--settings", default=",".join(settings()),
                        help="comma-separated names of settings() to run")
    return parser.parse_args()


def load_shard(rank, size, seed):
    """This worker's share of the training split (equal shards), and the held-out split."""
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32")
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.25, random_state=seed, stratify=y)
    n = len(x_train) // size
    return (x_train[rank::size][:n], y_train[rank::size][:n]), (x_test, y_test)


def build_model(seed):
    keras.utils.set_random_seed(seed)  # the same start on every worker and for every setting
    return keras.Sequential([
        keras.Input(shape=(64,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10),
    ])


def train(name, compressor, args, shard, held_out):
    (x, y), (x_test, y_test) = shard, held_out
    model = build_model(args.seed)
    ps = compressor is None
    if ps:
        from tf_ps_ops import optimizers as ps_optimizers
        opt = ps_optimizers.SGD(args.lr, momentum=args.momentum)
        opt.build(model.trainable_variables)
    else:
        opt = keras.optimizers.SGD(args.lr, momentum=args.momentum)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    keys = [f"conv.{name}.{i}" for i in range(len(model.trainable_variables))]

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        if not ps:  # PS mode: the optimizer pushes the gradients itself
            grads = [hvd.push_pull(g, average=True, name=k, compression=compressor)
                     for g, k in zip(grads, keys)]
        opt.apply(grads, model.trainable_variables)
        return loss

    steps = len(x) // args.batch_size
    rng = np.random.default_rng(args.seed)  # the same order on every worker and setting
    accuracy, losses = [], []
    sent_before = _library.c_api().tfps_bytes_sent()
    start = time.perf_counter()
    for _ in range(args.epochs):
        order = rng.permutation(len(x))
        epoch_loss = 0.0
        for s in range(steps):
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            epoch_loss += float(step(x[idx], y[idx]))
        losses.append(epoch_loss / steps)
        predicted = np.argmax(model(x_test, training=False).numpy(), axis=1)
        accuracy.append(float(np.mean(predicted == y_test)))
    sent = _library.c_api().tfps_bytes_sent() - sent_before
    return dict(setting=name, accuracy=accuracy, loss=losses, steps=steps * args.epochs,
                seconds=round(time.perf_counter() - start, 2), bytes_sent=sent,
                received=_library.c_api().tfps_bytes_received(),
                compression=os.environ.get("TFPS_COMPRESSION", "none") if ps else None)


def main():
    args = parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    hvd.init()
    shard, held_out = load_shard(hvd.rank(), hvd.size(), args.seed)
    available = settings()
    for name in args.settings.split(","):
        result = train(name, available[name], args, shard, held_out)
        if hvd.rank() == 0:
            print("RESULT " + json.dumps(result), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()

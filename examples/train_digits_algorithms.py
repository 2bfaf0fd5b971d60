"""The digits MLP of train_digits.py trained with each of Bagua's algorithms in turn
(tf_ps_ops.algorithms, docs/algorithms.md), next to the summation path:

    python3 -m tf_ps_ops.run -np 3 -ns 1 python3 examples/train_digits_algorithms.py

Every worker prints, per algorithm, one line the tests and the benchmark parse:
    result algorithm=NAME rank=R accuracy=A seconds=S steps=N
(held-out accuracy of this worker's own model: decentralized replicas differ slightly).
"""

import argparse
import os
import sys
import time

import keras
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_digits import build_model, load_shard  # noqa: E402

import tf_ps_ops as hvd  # noqa: E402
from tf_ps_ops import algorithms  # noqa: E402

ALGORITHMS = ["allreduce", "gradient_allreduce", "decentralized", "shift_one",
              "low_precision", "async", "qadam"]


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS),
                        help="comma-separated, from " + ", ".join(ALGORITHMS))
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--width", type=int, default=0,
                        help="hidden units of both layers (0: train_digits.py's 128, 64); "
                             "the benchmark widens the model to make communication count")
    parser.add_argument("--fusion-bytes", type=int, default=0,
                        help="decentralized algorithms: exchange the variables in flat "
                             "messages of up to this many bytes (0: one per variable)")
    parser.add_argument("--sync-interval-ms", type=float, default=20.0,
                        help="async: pause between averaging rounds")
    parser.add_argument("--target", type=float, default=0.0,
                        help="also print the seconds until the held-out accuracy, "
                             "measured after every epoch, first reached this")
    return parser.parse_args()


def make_optimizer(name, size, fusion_bytes=0, sync_interval_ms=20.0):
    """The optimizer and its algorithm (None for plain summation). Averaging algorithms
    step on local gradients with the same learning rate as the summation path's averaged
    ones."""
    lr = 0.01 * size
    fusion = fusion_bytes or None
    sgd = keras.optimizers.SGD(lr, momentum=0.9)
    choices = {
        "allreduce": lambda: hvd.DistributedOptimizer(sgd, name=name),
        "gradient_allreduce": lambda: algorithms.GradientAllReduce(),
        "decentralized": lambda: algorithms.Decentralized("ring", fusion_bytes=fusion),
        "shift_one": lambda: algorithms.Decentralized("shift_one", fusion_bytes=fusion),
        "low_precision": lambda: algorithms.LowPrecisionDecentralized(fusion_bytes=fusion),
        "async": lambda: algorithms.AsyncModelAverage(sync_interval_ms, warmup_steps=15),
        "qadam": lambda: algorithms.QAdam(warmup_steps=30),
    }
    made = choices[name]()
    if isinstance(made, keras.optimizers.Optimizer):
        return made, None
    inner = keras.optimizers.Adam(0.001 * size) if name == "qadam" else sgd
    return hvd.DistributedOptimizer(inner, name=name, algorithm=made), made


def wide_model(width):
    return keras.Sequential([
        keras.Input(shape=(64,)),
        keras.layers.Dense(width, activation="relu"),
        keras.layers.Dense(width, activation="relu"),
        keras.layers.Dense(10),
    ])


class _TimeToTarget(keras.callbacks.Callback):
    """Seconds from the start of training until the held-out accuracy (checked at each
    epoch's end, the check's own time excluded) first reaches the target; and each
    step's time."""

    def __init__(self, data, target):
        super().__init__()
        self.data, self.target, self.start, self.reached = data, target, None, None
        self.excluded, self.step_times, self._step_start = 0.0, [], None

    def on_train_begin(self, logs=None):
        self.start = time.perf_counter()

    def on_train_batch_begin(self, batch, logs=None):
        self._step_start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.step_times.append(time.perf_counter() - self._step_start)

    def on_epoch_end(self, epoch, logs=None):
        if self.target and self.reached is None:
            checked = time.perf_counter()
            _, accuracy = self.model.evaluate(*self.data, verbose=0)
            if accuracy >= self.target:
                self.reached = checked - self.start - self.excluded
            self.excluded += time.perf_counter() - checked


def train(name, args, rank, size, shard, test):
    keras.utils.set_random_seed(args.seed + rank)
    model = wide_model(args.width) if args.width else build_model()
    opt, algorithm = make_optimizer(name, size, args.fusion_bytes, args.sync_interval_ms)
    model.compile(optimizer=opt,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], jit_compile=False)
    timer = _TimeToTarget(test, args.target)
    start = time.perf_counter()
    history = model.fit(*shard, batch_size=args.batch_size, epochs=args.epochs, verbose=0,
                        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), timer,
                                   *opt.algorithm_callbacks()])
    seconds = time.perf_counter() - start
    _, accuracy = model.evaluate(*test, verbose=0)
    steps = int(opt.iterations.numpy())
    reached = f" to_target={timer.reached:.3f}" if timer.reached is not None else ""
    if isinstance(algorithm, algorithms.AsyncModelAverage):
        reached += f" averaged={algorithm.applied}"  # rounds written into these weights
    # The median step, the first epoch (tracing, warm-ups) left out.
    later = sorted(timer.step_times[len(timer.step_times) // args.epochs:]) or [0.0]
    print(f"result algorithm={name} rank={rank} accuracy={accuracy:.4f} seconds={seconds:.3f} "
          f"steps={steps} loss={history.history['loss'][-1]:.4f} "
          f"step_ms={1000 * later[len(later) // 2]:.2f}{reached}", flush=True)


def main():
    args = parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    shard, test = load_shard(rank, size, args.seed)
    for name in args.algorithms.split(","):
        if name == "shift_one" and size % 2:
            print(f"skipped algorithm={name}: it pairs workers, needs an even number",
                  flush=True)
            continue
        train(name, args, rank, size, shard, test)
    hvd.shutdown()


if __name__ == "__main__":
    main()

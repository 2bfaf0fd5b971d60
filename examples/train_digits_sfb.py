"""The digits MLP of train_digits.py with its Dense layers' weight gradients exchanged as
sufficient factors (SFB, docs/sfb.md): each worker sends its batch's layer inputs and
output gradients to the others, and every worker rebuilds the same averaged gradient.

    tfps-run -np 2 -ns 1 python3 examples/train_digits_sfb.py                # every Dense by SFB
    tfps-run -np 2 -ns 1 python3 examples/train_digits_sfb.py --mode hybrid  # HybComm decides

With --mode hybrid, Poseidon's cost model compares, per Dense layer, the bytes SFB would
move (batch × (inputs + outputs) per peer) with a parameter server's (inputs × outputs) and
prints its choice; biases always go through the servers.
"""

import argparse
import os
import sys

import keras
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_digits import build_model, load_shard  # noqa: E402

import sfb  # noqa: E402
import tf_ps_ops as hvd  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mode", choices=["sfb", "hybrid"], default="sfb")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def main():
    args = parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    (x_train, y_train), (x_test, y_test) = load_shard(rank, size, args.seed)

    keras.utils.set_random_seed(args.seed + rank)
    # A copy of the model with its Dense layers replaced where SFB is chosen, same weights.
    model = sfb.convert(build_model(), mode=args.mode, batch_size=args.batch_size)
    if rank == 0:
        chosen = [layer.name for layer in model.layers if isinstance(layer, sfb.Dense)]
        print(f"layers by SFB ({args.mode}): {', '.join(chosen) or 'none'}")
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * size,
                                                                          momentum=0.9)),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"],
                  jit_compile=False)
    model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                         hvd.callbacks.MetricAverageCallback()],
              verbose=2 if rank == 0 else 0)

    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    if rank == 0:
        print(f"held-out: accuracy {accuracy:.4f} ({len(x_test)} samples, {size} workers, "
              f"--mode {args.mode})")
    hvd.shutdown()


if __name__ == "__main__":
    main()

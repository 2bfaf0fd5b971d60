"""The digits MLP of train_digits.py as an elastic job (docs/elastic.md): a worker that dies
does not end the job; the others go on from their last commit, and a replacement joins at
the next one.

    tfps-run -np 3 -ns 1 --elastic --elastic-restarts 1 python3 examples/train_digits_elastic.py

Try it: kill one worker's process (`kill -9`) during training. The others log the new
membership ("epoch 1: rank 1 of 2 (was rank 1 of 3)"), restore the last commit and finish
the epoch; with --elastic-restarts 1 the driver starts a new worker that joins them. The
learning rate follows the number of workers (on_reset), as in Horovod's elastic examples.
"""

import argparse
import os
import sys

import keras
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_digits import build_model, load_shard  # noqa: E402

import tf_ps_ops.keras as hvd  # noqa: E402

BASE_LR = 0.01


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def main():
    args = parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)

    hvd.init()  # rank and size come from the elastic driver's current membership
    keras.utils.set_random_seed(args.seed)
    model = build_model()
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(BASE_LR * hvd.size(),
                                                              momentum=0.9))
    model.compile(optimizer=optimizer,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], jit_compile=False)
    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0, batch=0)

    def on_reset():
        # After a membership change: the new size scales the step size, as at the start.
        optimizer.learning_rate.assign(BASE_LR * hvd.size())

    state.register_reset_callbacks([on_reset])
    callbacks = [hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.CommitStateCallback(state)]  # commit last

    @hvd.elastic.run
    def train(state):
        # Each membership has its own shards: re-read ours for the current rank and size.
        (x_train, y_train), _ = load_shard(hvd.rank(), hvd.size(), args.seed)
        verbose = 2 if hvd.rank() == 0 else 0
        if state.batch:  # finish the training epoch a membership change interrupted
            start = state.batch * args.batch_size
            model.fit(x_train[start:], y_train[start:], batch_size=args.batch_size,
                      epochs=state.epoch + 1, initial_epoch=state.epoch, shuffle=False,
                      callbacks=callbacks, verbose=verbose)
        model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs,
                  initial_epoch=state.epoch, callbacks=callbacks, verbose=verbose)

    train(state)

    _, (x_test, y_test) = load_shard(hvd.rank(), hvd.size(), args.seed)
    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    if hvd.rank() == 0:
        print(f"held-out: accuracy {accuracy:.4f} ({len(x_test)} samples, "
              f"{hvd.size()} workers at the end)")
    hvd.shutdown()


if __name__ == "__main__":
    main()

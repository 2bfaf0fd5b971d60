"""Keras under hvd.elastic.run (tests/multiprocess/test_elastic.py).

    keras_worker.py OUT_DIR KILL_ID KILL_EPOCH KILL_BATCH

model.fit with DistributedOptimizer and the elastic callbacks (commit after every batch).
Worker KILL_ID SIGKILLs itself as batch KILL_BATCH of epoch KILL_EPOCH begins. Every
worker records the (epoch, batch) position each batch starts at, and writes OUT_DIR/<id>.json
with them, the final state and weights.
"""

import json
import os
import signal
import sys

import numpy as np
import tensorflow as tf

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

import keras  # noqa: E402

import tf_ps_ops.keras as hvd  # noqa: E402

EPOCHS, STEPS, BATCH = 3, 4, 8


def main():
    out_dir, kill_id = sys.argv[1], sys.argv[2]
    kill_at = (int(sys.argv[3]), int(sys.argv[4]))
    me = os.environ["TFPS_ELASTIC_ID"]
    hvd.init()
    rng = np.random.default_rng(int(me[1:]))
    x = rng.normal(size=(STEPS * BATCH, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32)).astype(np.float32)
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05))
    model.compile(optimizer=optimizer, loss="mse", jit_compile=False)
    model.fit(x[:BATCH], y[:BATCH], batch_size=BATCH, epochs=1, verbose=0)  # builds the slots
    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0, batch=0)
    started = []

    class Recorder(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            position = (state.epoch, state.batch)
            if me == kill_id and position == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            started.append(position)

    callbacks = [Recorder(), hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.CommitStateCallback(state)]

    @hvd.elastic.run
    def train(state):
        if state.batch:  # finish the epoch a membership change interrupted
            start = state.batch * BATCH
            model.fit(x[start:], y[start:], batch_size=BATCH, epochs=state.epoch + 1,
                      initial_epoch=state.epoch, shuffle=False, verbose=0,
                      callbacks=callbacks)
        if state.epoch < EPOCHS:
            model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, initial_epoch=state.epoch,
                      shuffle=False, verbose=0, callbacks=callbacks)

    train(state)
    with open(os.path.join(out_dir, f"{me}.json"), "w") as f:
        json.dump({"started": started, "epoch": state.epoch, "batch": state.batch,
                   "size": hvd.size(),
                   "weights": [w.tolist() for w in model.get_weights()]}, f)


if __name__ == "__main__":
    main()

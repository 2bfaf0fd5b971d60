"""Worker for test_stall.py: a 2-worker Keras fit in which rank 0 spends a while in a
callback between epochs (a rank-0-only evaluation, a checkpoint), while rank 1 goes on
into the next epoch and waits for rank 0's gradients.

    stall_worker.py SLEEP_S OUT_DIR [SLEEPER]

With $TFPS_TEST_GO set, a worker that has imported everything makes OUT_DIR/ready<r> and
waits for that file before init() (the test's short TFPS_TIMEOUT bounds the rendezvous).
Rank SLEEPER (default 0) prints "sleeping" and sleeps SLEEP_S at the end of epoch 0. Every rank writes its
trained weights to OUT_DIR/rank<r>.npz and prints "trained"; a training error is printed
("training failed: ...") and exits 3. The test compares the weights with `oracle()`.
"""

import os
import sys
import time

import numpy as np

NUM_WORKERS, BATCH, STEPS, EPOCHS, LEARNING_RATE = 2, 4, 3, 2, 0.1


def data():
    """The global data set: STEPS global batches of NUM_WORKERS * BATCH rows."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(STEPS * NUM_WORKERS * BATCH, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3).astype(np.float32)
    return x, y


def shard(array, rank):
    """Rank `rank`'s rows: its slice of every global batch, in step order."""
    batches = array.reshape(STEPS, NUM_WORKERS, BATCH, *array.shape[1:])
    return batches[:, rank].reshape(STEPS * BATCH, *array.shape[1:])


def oracle():
    """Plain SGD on the mean-squared error of a zero-initialised Dense(1), the gradient
    averaged over the workers' batches (NumPy): (kernel, bias) after the fit."""
    x, y = data()
    kernel, bias = np.zeros((3, 1), np.float64), np.zeros(1, np.float64)
    for _ in range(EPOCHS):
        for step in range(STEPS):
            grads_k, grads_b = [], []
            for rank in range(NUM_WORKERS):
                xb = shard(x, rank)[step * BATCH:(step + 1) * BATCH].astype(np.float64)
                yb = shard(y, rank)[step * BATCH:(step + 1) * BATCH].astype(np.float64)
                error = xb @ kernel + bias - yb
                grads_k.append(2 * xb.T @ error / BATCH)
                grads_b.append(2 * error.sum(0) / BATCH)
            kernel -= LEARNING_RATE * np.mean(grads_k, axis=0)
            bias -= LEARNING_RATE * np.mean(grads_b, axis=0)
    return kernel, bias


def main():
    sleep_s, out_dir = float(sys.argv[1]), sys.argv[2]
    sleeper = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    import keras
    import tensorflow as tf

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from harness import pin_threads

    pin_threads()
    import tf_ps_ops as hvd

    go = os.environ.get("TFPS_TEST_GO")
    if go:
        place = os.environ["TFPS_RANK"]
        open(os.path.join(out_dir, f"ready{place}"), "w").close()
        while not os.path.exists(go):
            time.sleep(0.05)
    hvd.init()
    rank = hvd.rank()

    class SlowRankZero(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if rank == sleeper and epoch == 0:
                print("sleeping", flush=True)
                time.sleep(sleep_s)

    model = keras.Sequential([keras.Input((3,)),
                              keras.layers.Dense(1, kernel_initializer="zeros")])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LEARNING_RATE)),
                  loss="mse", jit_compile=False)
    x, y = data()
    try:
        model.fit(shard(x, rank), shard(y, rank), batch_size=BATCH, epochs=EPOCHS,
                  shuffle=False, verbose=0, callbacks=[SlowRankZero()])
    except tf.errors.OpError as e:
        print(f"training failed: {e.message}", file=sys.stderr, flush=True)
        sys.exit(3)
    kernel, bias = (w.numpy() for w in model.trainable_variables)
    np.savez(os.path.join(out_dir, f"rank{rank}.npz"), kernel=kernel, bias=bias)
    print("stalls", int(hvd.metrics().get("tfps_stalls_total", -1)), flush=True)
    print("trained", flush=True)


if __name__ == "__main__":
    main()

"""examples/train_digits.py's MLP on scikit-learn's digits under TFPS_CONSISTENCY, with one
worker slowed (a sleep after each of its batches): test_consistency.py compares held-out
accuracy under ssp/asp with bsp's. Every worker evaluates its own replica and prints
`accuracy <rank> <value>`.
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
import harness  # noqa: E402

SLOW_RANK = int(os.environ.get("TEST_SLOW_RANK", "-1"))
SLOW_SECONDS = float(os.environ.get("TEST_SLOW_SECONDS", "0.01"))
EPOCHS = int(os.environ.get("TEST_EPOCHS", "5"))


def main():
    harness.pin_threads()
    import keras
    import tf_ps_ops as hvd
    import train_digits

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    (x_train, y_train), (x_test, y_test) = train_digits.load_shard(rank, size, 0)
    keras.utils.set_random_seed(rank)
    model = train_digits.build_model()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * size, momentum=0.9))
    model.compile(optimizer=opt,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], jit_compile=False)

    class Slow(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if rank == SLOW_RANK:
                time.sleep(SLOW_SECONDS)

    model.fit(x_train, y_train, batch_size=32, epochs=EPOCHS, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), Slow()])
    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    print(f"accuracy {rank} {accuracy:.6f}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()

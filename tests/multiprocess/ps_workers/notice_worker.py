"""PS-mode worker for test_failure_notice.py: waits for the file GO, then trains a small
Keras model step after step (server-side SGD) until a step fails or STEPS are done.

    notice_worker.py GO STEPS

Prints "ready" before waiting, "step N ok" after each step; on a failed step prints
"step N failed: <first line>" and exits 3.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workers"))
import harness  # noqa: E402


def main():
    go, steps = sys.argv[1], int(sys.argv[2])
    harness.pin_threads()
    import keras
    import numpy as np
    import tensorflow as tf
    import tf_ps_ops as hvd
    from tf_ps_ops import optimizers

    hvd.init()
    keras.utils.set_random_seed(7)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    opt = optimizers.SGD(learning_rate=0.01)
    opt.build(model.trainable_variables)
    print("ready", flush=True)
    deadline = time.monotonic() + 90
    while not os.path.exists(go):
        assert time.monotonic() < deadline, f"{go} never appeared"
        time.sleep(0.05)
    rng = np.random.default_rng(hvd.rank())
    for step in range(1, steps + 1):
        x = rng.standard_normal((8, 4)).astype(np.float32)
        try:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(model(x) ** 2)
            opt.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        except tf.errors.OpError as e:
            print(f"step {step} failed: {str(e).splitlines()[0]}", file=sys.stderr, flush=True)
            sys.exit(3)
        print(f"step {step} ok", flush=True)
        time.sleep(0.2)
    hvd.shutdown()


if __name__ == "__main__":
    main()

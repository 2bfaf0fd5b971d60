"""fit() with tf_ps_ops.callbacks.MetricsCallback, in Keras 3 or tf_keras (TFPS_TEST_KERAS:
"keras" or "tf_keras"), then reads back the TensorBoard scalars it wrote: writes
OUT_DIR/keras-R.json with {tag: [values]} and the model's parameter count."""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workers"))
from harness import pin_threads  # noqa: E402

import tensorflow as tf  # noqa: E402

pin_threads()
if os.environ["TFPS_TEST_KERAS"] == "tf_keras":
    import tf_keras as K
else:
    import keras as K

import tf_ps_ops as hvd  # noqa: E402
import tf_ps_ops.keras as hvd_keras  # noqa: E402

BATCH, FEATURES, UNITS, STEPS, EVERY = 8, 5, 3, 8, 2


def scalars(log_dir):
    """{tag: [value, ...]} of the event files under log_dir."""
    found = {}
    for name in sorted(os.listdir(log_dir)):
        for event in tf.compat.v1.train.summary_iterator(os.path.join(log_dir, name)):
            for value in event.summary.value:
                number = value.simple_value if value.HasField("simple_value") else \
                    float(tf.make_ndarray(value.tensor))
                found.setdefault(value.tag, []).append(number)
    return found


def main():
    hvd.init()
    rank = hvd.rank()
    out = os.environ["OUT_DIR"]
    rng = np.random.default_rng(rank)
    x = rng.normal(size=(STEPS * BATCH, FEATURES)).astype(np.float32)
    y = rng.normal(size=(STEPS * BATCH, UNITS)).astype(np.float32)
    model = K.Sequential([K.Input((FEATURES,)), K.layers.Dense(UNITS)])
    model.compile(optimizer=hvd_keras.DistributedOptimizer(K.optimizers.SGD(0.01)), loss="mse")
    callback = hvd.callbacks.MetricsCallback(os.path.join(out, "tb-%r"), batch_size=BATCH,
                                             every_n_batches=EVERY)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=[callback])
    report = {"scalars": scalars(os.path.join(out, f"tb-{rank}")),
              "parameters": int(model.count_params()), "last": callback.last,
              "class": type(callback).__module__ + "." + type(callback).__name__,
              "base": [c.__module__ for c in type(callback).__mro__]}
    with open(os.path.join(out, f"keras-{rank}.json"), "w") as f:
        json.dump(report, f)
    hvd.shutdown()


if __name__ == "__main__":
    main()

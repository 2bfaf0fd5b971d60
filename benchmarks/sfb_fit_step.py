"""Step time of `fit` for one 4096×4096 Dense layer, by SFB and by push_pull (docs/sfb.md).

    python3 benchmarks/sfb_fit_step.py [--workers 2] [--batch 32] [--intra 1]

Starts a local cluster (tests/cluster.py: scheduler, 1 server, the workers), where each
worker trains the layer with each path twice and prints the median step time of each run.
"""

import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UNITS = 4096
STEPS = 8


def worker(batch, intra):
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    import keras

    import sfb
    import tf_ps_ops as hvd

    hvd.init()
    rng = np.random.default_rng(hvd.rank())
    x = rng.normal(size=(batch * (STEPS + 2), UNITS)).astype(np.float32)
    y = rng.normal(size=(batch * (STEPS + 2), UNITS)).astype(np.float32)
    medians = {}
    for path in ("sfb", "push_pull") * 2:
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((UNITS,)), keras.layers.Dense(UNITS, name="fc")])
        if path == "sfb":
            model = sfb.convert(model)
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)),
                      loss="mse", jit_compile=False)
        stamps = []
        clock = keras.callbacks.LambdaCallback(
            on_train_batch_begin=lambda batch, logs: stamps.append(time.perf_counter()),
            on_train_end=lambda logs: stamps.append(time.perf_counter()))
        model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0,
                  callbacks=[clock])
        steps = np.diff(stamps)[2:]  # the first steps trace and warm up
        medians.setdefault(path, []).append(round(float(np.median(steps)), 4))
    print("SFB_FIT_STEP " + json.dumps({"rank": hvd.rank(), "seconds": medians}), flush=True)
    hvd.shutdown()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--intra", type=int, default=1)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.batch, args.intra)
    sys.path[:0] = [os.path.join(ROOT, "tests"), ROOT]  # the fixture, and what it uses
    from cluster import Cluster

    cluster = Cluster(tempfile.mkdtemp(prefix="sfb_bench"), args.workers, 1, timeout=600)
    try:
        cluster.start([sys.executable, os.path.abspath(__file__), "--worker",
                       "--batch", str(args.batch), "--intra", str(args.intra)])
        cluster.wait()
        cluster.assert_ok()
        for result in cluster.worker_results():
            print(next(line for line in result.stdout.splitlines()
                       if line.startswith("SFB_FIT_STEP ")))
    finally:
        cluster.close()


if __name__ == "__main__":
    main()

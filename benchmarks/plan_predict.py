"""The cost model's predicted step time beside the measured one, on a local cluster.

    python3 benchmarks/plan_predict.py [--workers 2] [--batch 64] [--units 1024] [--layers 4]

Each worker measures the cluster as plan="auto" does (a push_pull probe through the
transport, the core's codec timings) and profiles the model's local step (its compute
rate), predicts the step time of `fit` with the default configuration (every gradient
summed, uncompressed), then trains and reports the median measured step.
"""

import argparse
import json
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEPS = 12


def worker(args):
    import dataclasses

    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    import keras

    import tf_ps_ops as hvd
    from tf_ps_ops.plan import cost, layers, measure

    hvd.init()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((args.units,))] + [
        keras.layers.Dense(args.units, activation="relu", name=f"fc{i}")
        for i in range(args.layers)])
    measured = measure.measure_cluster()
    rate = measure.model_rate(model, args.batch)
    machine = dataclasses.replace(measured.machine, macs_per_s=rate)
    lay = layers.from_keras(model)
    predicted, _ = cost.step_time(lay, [cost.Choice()] * len(lay), measured.cluster, machine,
                                  args.batch)
    rng = np.random.default_rng(hvd.rank())
    x = rng.normal(size=(args.batch * STEPS, args.units)).astype(np.float32)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.001)),
                  loss="mse", jit_compile=False)
    stamps = []
    clock = keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda batch, logs: stamps.append(time.perf_counter()),
        on_train_end=lambda logs: stamps.append(time.perf_counter()))
    model.fit(x, x, batch_size=args.batch, epochs=1, shuffle=False, verbose=0,
              callbacks=[clock])
    step = float(np.median(np.diff(stamps)[2:]))
    print("PLAN_PREDICT " + json.dumps({
        "rank": hvd.rank(), "predicted_s": round(predicted, 5), "measured_s": round(step, 5),
        "error": round(predicted / step - 1, 3), "link_gbps": round(
            measured.cluster.bandwidth * 8e-9, 2), "latency_us": round(
            measured.cluster.latency * 1e6), "gmacs": round(rate / 1e9, 1)}), flush=True)
    hvd.shutdown()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--units", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    sys.path[:0] = [os.path.join(ROOT, "tests"), ROOT]
    from cluster import Cluster

    cluster = Cluster(tempfile.mkdtemp(prefix="plan_predict"), args.workers, 1, timeout=600)
    try:
        cluster.start([sys.executable, os.path.abspath(__file__), "--worker", "--batch",
                       str(args.batch), "--units", str(args.units), "--layers",
                       str(args.layers)])
        cluster.wait()
        cluster.assert_ok()
        for result in cluster.worker_results():
            print(next(line for line in result.stdout.splitlines()
                       if line.startswith("PLAN_PREDICT ")))
    finally:
        cluster.close()


if __name__ == "__main__":
    main()

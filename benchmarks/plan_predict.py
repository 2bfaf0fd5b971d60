"""The cost model's predicted step time beside the measured one, on a local cluster.

    python3 benchmarks/plan_predict.py [--workers 2] [--batch 64] [--units 1024] [--layers 4]

Each worker measures the cluster as plan="auto" does (a push_pull probe through the
transport, the core's codec timings) and profiles the model's local step (its compute
rate), predicts the step time of `fit` with the default configuration (every gradient
summed, uncompressed), then trains and reports the median measured step.

Beside it, the terms: the model's compute time against a local `fit` step of the same
model (plain SGD, both workers at once), the gradients' communication alone, and the
prediction again given this run's local step (error_given_local_fit) and also its
communication alone (error_given_fit_and_comm: what is left is the model of their
overlap), each with and without the compute lost to communication (compute_loss).
--timeline PATH writes each worker's TFPS_TIMELINE trace (benchmarks/timeline_summary.py).
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
    from tf_ps_ops.plan import cost, layers, measure, profile, steptime, update_probe

    hvd.init()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((args.units,))] + [
        keras.layers.Dense(args.units, activation="relu", name=f"fc{i}")
        for i in range(args.layers)])
    measured = measure.measure_cluster()
    rate = profile.model_rate(model, args.batch)
    machine = dataclasses.replace(measured.machine, macs_per_s=rate,
                                  apply_per_byte=update_probe.apply_cost(model))
    lay = layers.from_keras(model)
    predicted, _ = steptime.step_time(lay, [cost.Choice()] * len(lay), measured.cluster, machine,
                                      args.batch)
    rng = np.random.default_rng(hvd.rank())
    x = rng.normal(size=(args.batch * STEPS, args.units)).astype(np.float32)
    local = keras.models.clone_model(model)
    local.compile(optimizer=keras.optimizers.SGD(0.001), loss="mse", jit_compile=False)
    local_step = _fit_step(keras, local, x, args.batch)
    comm = _comm_step(tf, hvd, model)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.001)),
                  loss="mse", jit_compile=False)
    step = _fit_step(keras, model, x, args.batch)
    forward, backward = steptime.compute_times(lay, machine, args.batch)
    # The same model with the compute rate of this run's local fit (isolates the
    # communication side) and without the compute lost to communication (the model
    # before compute_loss was measured).
    apply_s = machine.apply_per_byte * sum(layer.bytes for layer in lay)
    fitted = dataclasses.replace(machine, macs_per_s=rate * (sum(forward) + sum(backward))
                                 / max(local_step - apply_s, 1e-6))
    given_local, _ = steptime.step_time(lay, [cost.Choice()] * len(lay), measured.cluster,
                                        fitted, args.batch)
    no_loss, _ = steptime.step_time(lay, [cost.Choice()] * len(lay), measured.cluster,
                                    dataclasses.replace(fitted, compute_loss=0.0), args.batch)
    # And with the link's bandwidth from this run's communication alone (the gradients
    # reduced one after another): what is left is the model's overlap of the two.
    costs = [cost.layer_cost(layer, cost.Choice(), measured.cluster, fitted, args.batch,
                             steptime.Settings().partition_bytes) for layer in lay]
    link = dataclasses.replace(measured.cluster, bandwidth=sum(
        c.link_bytes + c.tail_bytes for c in costs) / max(
        comm - len(model.trainable_variables) * measured.cluster.latency, 1e-6))
    given_both = [steptime.step_time(lay, [cost.Choice()] * len(lay), link, m, args.batch)[0]
                  for m in (fitted, dataclasses.replace(fitted, compute_loss=0.0))]
    print("PLAN_PREDICT " + json.dumps({
        "rank": hvd.rank(), "predicted_s": round(predicted, 5), "measured_s": round(step, 5),
        "error": round(predicted / step - 1, 3), "link_gbps": round(
            measured.cluster.bandwidth * 8e-9, 2), "latency_us": round(
            measured.cluster.latency * 1e6), "gmacs": round(rate / 1e9, 1),
        "compute_loss": round(machine.compute_loss, 3),
        "apply_s": round(machine.apply_per_byte * sum(layer.bytes for layer in lay), 5),
        "compute_predicted_s": round(sum(forward) + sum(backward) + machine.apply_per_byte
                                     * sum(layer.bytes for layer in lay), 5),
        "local_fit_s": round(local_step, 5), "comm_only_s": round(comm, 5),
        "link_gbps_comm_only": round(link.bandwidth * 8e-9, 2),
        "predicted_given_local_fit_s": round(given_local, 5),
        "error_given_local_fit": round(given_local / step - 1, 3),
        "error_given_local_fit_no_loss": round(no_loss / step - 1, 3),
        "error_given_fit_and_comm": round(given_both[0] / step - 1, 3),
        "error_given_fit_and_comm_no_loss": round(given_both[1] / step - 1, 3)}), flush=True)
    hvd.shutdown()


def _fit_step(keras, model, x, batch):
    """Median seconds per `fit` step of `model`, the first two steps left out."""
    import numpy as np

    stamps = []
    clock = keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda batch, logs: stamps.append(time.perf_counter()),
        on_train_end=lambda logs: stamps.append(time.perf_counter()))
    model.fit(x, x, batch_size=batch, epochs=1, shuffle=False, verbose=0, callbacks=[clock])
    return float(np.median(np.diff(stamps)[2:]))


def _comm_step(tf, hvd, model, steps=STEPS):
    """Median seconds to average the model's gradients (zeros of their shapes) alone; the
    tf.function runs the allreduces one after another (a TFPS_TIMELINE trace shows it)."""
    import numpy as np

    grads = [tf.zeros(v.shape) for v in model.trainable_variables]

    @tf.function
    def reduce():
        return [hvd.allreduce(g, name=f"plan_predict.comm.{i}") for i, g in enumerate(grads)]

    times = []
    for _ in range(steps):
        start = time.perf_counter()
        [r.numpy() for r in reduce()]
        times.append(time.perf_counter() - start)
    return float(np.median(times[2:]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--units", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--timeline", default=None,
                        help="TFPS_TIMELINE for the workers (%%r: the rank)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    sys.path[:0] = [os.path.join(ROOT, "tests"), ROOT]
    from cluster import Cluster

    cluster = Cluster(tempfile.mkdtemp(prefix="plan_predict"), args.workers, 1, timeout=600,
                      env={"TFPS_TIMELINE": args.timeline} if args.timeline else None)
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

"""A local step of the model, profiled: the compute rate sfb.convert(mode="auto") plans
with (model_rate, shared_model_rate), and how much slower that step runs while the link
is busy (model_compute_loss); benchmarks/plan_predict.py's and train_bench's too.
"""

import logging
import math
import os
import time

import numpy as np

from tf_ps_ops.plan import cost, measure

_logger = logging.getLogger("tf_ps_ops.plan")


def local_step(model, batch_size, sync=None):
    """A function that runs one local step of `model` (forward and backward, no
    communication) on made-up inputs of its shapes (floats drawn at random, integer ids 0)
    and waits for its gradients. Inference-mode layers (training=False): the profile must
    not move a BatchNormalization's statistics. sync(gradients, variables), given, turns
    the gradients into what the step returns (sync_op_cpu: averaged over the workers)."""
    import tensorflow as tf

    inputs = [_made_up_input(tf, tensor, batch_size) for tensor in model.inputs]
    x = inputs[0] if len(inputs) == 1 else inputs

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            outputs = tf.nest.flatten(model(x, training=False))
            loss = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float32)) for o in outputs])
        grads = tape.gradient(loss, model.trainable_variables)
        return grads if sync is None else sync(grads, model.trainable_variables)

    def run():
        [(g.values if isinstance(g, tf.IndexedSlices) else g).numpy()
         for g in step() if g is not None]

    run()  # traces
    return run


def traced_step(model, batch_size):
    """local_step(model, batch_size), or None where the model cannot run on made-up
    inputs: traced once for the probes that time it (model_rate, shared_model_rate,
    model_compute_loss, sync_op_cpu take it as `run`); given None, each tries again itself
    and logs why it could not."""
    try:
        return local_step(model, batch_size)
    except Exception:  # noqa: BLE001 - each probe then logs its own warning
        return None


def _median_step(run, steps):
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def model_rate(model, batch_size, steps=5, backward_ratio=2.0, run=None):
    """Forward multiply-adds per second of `model` on this worker: a profiled local step
    (local_step), the median of `steps` (as the step it predicts is a median: on a shared
    host the best of 3 was up to a third faster than `fit`'s median local step); the
    planner's per-layer compute times are the layers' multiply-adds at this rate, so
    everything else the step computes (lookups, norms, TensorFlow's own work) is spread
    over them. None without multiply-adds. `run`: the step traced already (traced_step)."""
    from tf_ps_ops.plan import layers as layer_lists

    lay = layer_lists.from_keras(model)
    macs = sum(layer.macs for layer in lay) * batch_size
    if not macs:
        return None
    # As steptime.compute_times counts: backward_ratio forwards per layer, one less for the
    # first (no gradient for the model's input).
    work = macs * (1 + backward_ratio) - lay[0].macs * batch_size
    return work / _median_step(run or local_step(model, batch_size), steps)


def _made_up_input(tf, tensor, batch_size):
    shape = [batch_size] + [1 if d is None else int(d) for d in tensor.shape[1:]]
    dtype = tf.as_dtype(tensor.dtype)
    if dtype.is_integer or dtype.is_bool:
        return tf.zeros(shape, dtype)
    return tf.cast(tf.random.normal(shape), dtype)


def shared_model_rate(model, batch_size, name="tfps.plan.model_rate", run=None):
    """model_rate on rank 0, for every worker (collective: the plan must agree), or None
    where rank 0 could not profile the model (logged; the plan keeps the matmul probe's
    rate)."""
    rate = 0.0
    try:
        rate = model_rate(model, batch_size, run=run) or 0.0
    except Exception as error:  # noqa: BLE001 - a model we cannot run on made-up inputs
        _logger.warning("could not profile a local step of %s (%s): the plan takes its "
                        "compute at the matrix-multiply probe's rate", model.name, error)
    return measure.rank0_value(rate, name) or None


# The link is kept busy for this many of the model's local steps and this many seconds,
# at least (within LOSS_MAX_PUSH_PULLS); the step alone is timed over LOSS_ALONE_SECONDS
# at least (within LOSS_ALONE_MAX_STEPS). A step of a few ms, timed over 3 steps alone
# and 4 beside the link, gave the DLRM-like model's kernels +5% CPU in one job and +55%
# in the next.
LOSS_STEPS = 4
LOSS_SECONDS = 0.25
LOSS_MAX_PUSH_PULLS = 64
LOSS_ALONE_SECONDS = 0.1
LOSS_ALONE_MAX_STEPS = 30


def _step_times(run, steps):
    """(median seconds, mean CPU-seconds of this process) per local step."""
    cpu = time.process_time()
    median = _median_step(run, steps)
    return median, (time.process_time() - cpu) / steps


def model_compute_loss(model, batch_size, cluster, name="tfps.plan.model_loss", steps=3,
                       run=None):
    """(compute_loss, compute_cpu_loss) of the cost model's Machine, rank 0's for every
    worker (collective), or None where rank 0 could not run the model (logged; the plan
    keeps the matmul probe's loss and no CPU loss): how much slower this model's local
    step runs, and how much more CPU its kernels take, while push_pulls of
    measure.PROBE_BYTES run beside it in a thread. The number of push_pulls, rank 0's,
    keeps the link busy for about LOSS_STEPS local steps or LOSS_SECONDS, the longer
    (`cluster`: the measured bandwidth and latency give one's time). `steps`: the fewest
    timed alone (more where they take under LOSS_ALONE_SECONDS). `run`: the local step
    traced already (traced_step).

    compute_loss: 1 - the step's time alone over its time beside the link. The matmul
    probe (measure.compute_loss) runs one large kernel at a time; a model's step is many
    small ones handed between TensorFlow's threads.
    compute_cpu_loss: the step's CPU beside the link, less what the same push_pulls take
    alone, over its CPU alone, less 1: the transport's copies pass the gradients' bytes
    through the caches the kernels work in. Two hosts emulated on this 2-core machine at
    1 Gbit/s: MobileNetV2's kernels took 1.4 times their CPU beside the link (perf, per
    step against a single process), where two single processes side by side lost
    nothing."""
    import tensorflow as tf

    from tf_ps_ops.collectives import ops

    alone, alone_cpu = 0.0, 0.0
    try:
        run = run or local_step(model, batch_size)
        first = _median_step(run, 1)
        steps = max(steps, min(LOSS_ALONE_MAX_STEPS,
                               math.ceil(LOSS_ALONE_SECONDS / max(first, 1e-6))))
        alone, alone_cpu = _step_times(run, steps)
    except Exception as error:  # noqa: BLE001 - a model we cannot run on made-up inputs
        _logger.warning("could not profile a local step of %s (%s): the plan takes the "
                        "compute lost to communication from the matrix-multiply probe",
                        model.name, error)
    one = cost._server_link(measure.PROBE_BYTES, cluster, False) / cluster.bandwidth \
        + cluster.latency
    wanted = 0 if run is None else math.ceil(max(LOSS_STEPS * alone, LOSS_SECONDS)
                                             / max(one, 1e-6))
    count = int(measure.rank0_value(float(min(LOSS_MAX_PUSH_PULLS, max(2, wanted))),
                                    f"{name}.count"))
    tensor = tf.constant(np.zeros(measure.PROBE_BYTES // 4, np.float32))
    once = tf.function(lambda: ops.allreduce(tensor, name=f"{name}.link")[:1])
    once().numpy()  # traces; the first call registers the key
    comm_cpu = time.process_time()
    for _ in range(count):
        once().numpy()
    comm_cpu = time.process_time() - comm_cpu
    # The steps that ended while the link was busy, and when the last of them ended.
    start, both_cpu = time.perf_counter(), time.process_time()
    finished, ended = [], start
    if run is not None:
        finished, ended = measure.beside_push_pulls(once, count, run,
                                                    "tfps-plan-model-probe")
    else:  # this worker cannot run the model: its part of the collective only
        for _ in range(count):
            once().numpy()
    both_cpu = time.process_time() - both_cpu
    inside = [t for t in finished if t <= ended] or finished[:1]
    loss, cpu_loss = -1.0, 0.0
    if run is not None and inside:
        busy = (inside[-1] - start) / len(inside)
        again, again_cpu = _step_times(run, steps)  # the better of before and after
        loss = min(1.0, max(0.0, 1.0 - min(alone, again) / busy))
        cpu_loss = max(0.0, (both_cpu - comm_cpu) / len(finished)
                       / max(min(alone_cpu, again_cpu), 1e-6) - 1.0)
    loss = measure.rank0_value(loss, name)
    cpu_loss = measure.rank0_value(cpu_loss, f"{name}.cpu")
    return None if loss < 0 else (loss, cpu_loss)


# sync_op_cpu's steps per timing: about this many seconds of the local step, within bounds.
SYNC_SECONDS = 0.25
SYNC_STEPS = (2, 30)
SYNC_ROUNDS = 3


def tensorflow_thread_cpu():
    """CPU seconds of this process's TensorFlow threads ("tf_*") and its main thread, in
    nanoseconds' resolution (/proc's schedstat: /proc/<pid>/stat counts 10 ms ticks), or
    None where /proc does not give them. The engine's and ZeroMQ's threads are not
    counted: the transport's probes price theirs."""
    total, seen = 0, False
    main = os.getpid()
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            if int(tid) != main and not name.startswith("tf_"):
                continue
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
            seen = True
        except (OSError, ValueError, IndexError):  # the thread ended, or no schedstat
            continue
    return total / 1e9 if seen else None


def sync_op_cpu(model, batch_size, name="tfps.plan.sync_cpu", run=None):
    """Machine.tf_per_op, rank 0's for every worker (collective), or None where a worker
    could not run the model or /proc gives no thread's CPU (logged; the plan then prices
    no such work): CPU seconds per collective op that the TensorFlow threads and Python's
    main thread spend on synchronising the model's own step, beyond that step alone.

    The local step (local_step), alternated SYNC_ROUNDS times with the same step whose
    gradients are then averaged over the workers as an unplanned DistributedOptimizer
    averages them (each summed on its own; an IndexedSlices gathered), each time for about
    SYNC_SECONDS of steps; the median difference of those threads' CPU per step, over the
    collective ops (one per gradient). It is what the transport's probes, tiny tensors
    pushed one after another outside any step, do not see: each op's kernel and its
    output, the averaging, and the hand-offs between the step's thread, the engine's and
    back while the rest of backward runs. Before it was priced, the DLRM-like model's
    TensorFlow thread at 3 emulated hosts on 2 cores spent 1.86 times the lone step's CPU
    in the distributed step, where the cost model added 6%. Measured on those hosts:
    71-87 us per op for that model, 29-44 us for MobileNetV2, 70 us for ResNet-50, 153 us
    for the BERT-shaped encoder. `run`: the local step traced already (traced_step)."""
    import tensorflow as tf

    from tf_ps_ops.collectives import ops
    from tf_ps_ops.collectives.compression import Compression
    from tf_ps_ops.training.tape import reduce_gradients

    counted = []

    def sync(grads, variables):
        pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
        counted.append(len(pairs))  # as it is traced
        return reduce_gradients([g for g, _ in pairs],
                                [f"{name}.{i}" for i in range(len(pairs))],
                                Compression.none, ops.Average,
                                variables=[v for _, v in pairs])

    alone, alone_s = None, 0.0
    try:
        alone = run or local_step(model, batch_size)
        alone_s = _median_step(alone, 3)
    except Exception as error:  # noqa: BLE001 - a model we cannot run on made-up inputs
        _logger.warning("could not profile a synchronised step of %s (%s): the plan prices "
                        "no TensorFlow work per collective op", model.name, error)
    clock = tensorflow_thread_cpu() is not None
    # Every worker must run the same collectives: none unless all can, rank 0's counts.
    able = float(alone is not None and clock)
    able = float(ops.allreduce(tf.constant([able], tf.float64), op=ops.Min,
                               name=f"{name}.able").numpy()[0])
    if not able:
        if not clock:
            _logger.warning("no per-thread CPU in /proc here: the plan prices no "
                            "TensorFlow work per collective op")
        return None
    steps = int(measure.rank0_value(float(min(SYNC_STEPS[1], max(
        SYNC_STEPS[0], math.ceil(SYNC_SECONDS / max(alone_s, 1e-6))))), f"{name}.steps"))
    synced = local_step(model, batch_size, sync)  # traced and run: the keys registered
    extra = []
    for _ in range(SYNC_ROUNDS):
        spent = []
        for run in (alone, synced):
            start = tensorflow_thread_cpu()
            for _ in range(steps):
                run()
            spent.append((tensorflow_thread_cpu() - start) / steps)
        extra.append(spent[1] - spent[0])
    per_op = max(0.0, float(np.median(extra))) / max(counted[-1], 1)
    return measure.rank0_value(per_op, name)

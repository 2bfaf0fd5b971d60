"""What a tensor costs this worker's CPU, probed for the cost model (measure.measure_cluster):
per byte, per push and pull of a tensor, and per partition the engine cuts a tensor into
beyond its first (transport_costs). Timed in this process's
CPU seconds, medians of a few calls of one tf.function each, after one that traces it.
benchmarks/tensor_cpu.py splits the same costs by thread.
"""

import time

import numpy as np

from tf_ps_ops.plan import cost

MESSAGE_PROBES = 32
# 32 tensors of 128 KiB: over cost.MIN_SPLIT_BYTES, so on two or more servers the engine
# cuts each into two partitions, where 32 tensors of a float each stay whole.
CUT_PROBE_BYTES = 128 << 10


def median_seconds(function, steps, clock=time.perf_counter):
    """The median seconds by `clock` of `steps` calls of a tf.function (after one that
    traces it)."""
    function()
    times = []
    for _ in range(steps):
        start = clock()
        function().numpy()
        times.append(clock() - start)
    return float(np.median(times))


def median_cpu_seconds(function, steps):
    """median_seconds in this process's CPU seconds. CPU, not wall time: every worker
    probes at once, and where workers share cores (several on one machine, or emulated
    hosts) the wall time of one also counts the others' turns. The cost model divides the
    host's CPU by its cores itself; on an idle core the two agree (the update runs on one
    thread). Three BERT-shaped workers on 2 cores timed their SGD-with-momentum update at
    2.4 times its CPU."""
    return median_seconds(function, steps, clock=time.process_time)


def chain(ops, tf, tensors, name):
    """One tf.function of a push_pull of each of `tensors`, their answers left in the
    graph (as a training step's are). No push_pull carries a variable's handle, so
    tf.function runs them one after another (see transport_costs); benchmarks/
    tensor_cpu_worker.py and chained_tensors.py time the same shape."""
    return tf.function(lambda: tf.add_n([ops.allreduce(t, name=f"{name}.{i}")[:1]
                                         for i, t in enumerate(tensors)]))


def _alternating_cpu(functions, repeats):
    """[median CPU seconds of each of `functions`], their calls alternating so that drift
    touches each alike (each traced first)."""
    for function in functions:
        function().numpy()
    cpu = [[] for _ in functions]
    for _ in range(repeats):
        for function, out in zip(functions, cpu):
            start = time.process_time()
            function().numpy()
            out.append(time.process_time() - start)
    return [float(np.median(c)) for c in cpu]


def transport_costs(ops, tf, name, repeats, big, small, servers, partition_bytes):
    """(CPU-seconds per byte sent or received, per push or pull of a tensor, per partition
    beyond a tensor's first) of this process. Collective.

    Per message: one tf.function with MESSAGE_PROBES tiny push_pulls against one with a
    single one. They carry no variable's handle, so tf.function's automatic control
    dependencies run them one after another, each its own round trip that wakes every
    thread on its way: a model's gradients, which carry theirs, overlap and leave several
    to a turn of the engine (32 overlapped tiny push_pulls cost a worker a fifth to a seventh
    of the CPU of 32 chained ones), so this prices a tensor above what an overlapped one
    costs, and stands in for what the real step spends beside it. A lone
    push_pull's CPU is mostly the eager call around it, which a step pays once: counted
    per message it put ResNet-50's predicted step 16% over the measured one at 10 Gbit/s.

    Per byte and partition: big, small are the CPU of one push_pull of
    measure.PROBE_BYTES and of a float ((CPU-seconds, bytes) each). A tensor the engine
    cuts in P partitions costs P - 1 of them more than its bytes (benchmarks/tensor_cpu.py:
    64 KiB tensors cost a float's tensor and their bytes, 128 KiB ones cut in two 55 µs
    more, most of it ZeroMQ's I/O thread); the big probe's own cut is taken out of its
    bytes' price. MESSAGE_PROBES tensors of CUT_PROBE_BYTES against the tiny ones above
    give the second equation (solve_transport); on one server nothing that size is cut,
    and cost.TRANSPORT_PER_PARTITION stays."""
    (big_cpu, big_bytes), (small_cpu, _) = big, small
    big_cut = cost.partition_count(big_bytes, partition_bytes, servers) - 1
    probe_cut = cost.partition_count(CUT_PROBE_BYTES, partition_bytes, servers) - 1
    tiny = [tf.constant(np.zeros(1, np.float32)) for _ in range(MESSAGE_PROBES)]
    functions = [chain(ops, tf, tiny, f"{name}.tiny"), chain(ops, tf, tiny[:1], f"{name}.one")]
    if probe_cut > 0:
        cut = [tf.constant(np.zeros(CUT_PROBE_BYTES // 4, np.float32))
               for _ in range(MESSAGE_PROBES)]
        functions.append(chain(ops, tf, cut, f"{name}.cut"))
    timed = _alternating_cpu(functions, repeats)
    tiny_cpu, one_cpu = timed[:2]
    per_message = max(0.0, (tiny_cpu - one_cpu) / (MESSAGE_PROBES - 1) / 2)
    cut_cpu = timed[2] if probe_cut > 0 else tiny_cpu
    per_byte, per_partition = solve_transport(
        (big_cpu - small_cpu, big_bytes, big_cut),
        (cut_cpu - tiny_cpu, MESSAGE_PROBES * CUT_PROBE_BYTES, MESSAGE_PROBES * probe_cut),
        cost.TRANSPORT_PER_PARTITION)
    return per_byte, per_message, per_partition


def solve_transport(big, cut, default_per_partition):
    """(per byte, per partition) from two probes, each (CPU-seconds beyond its tensors'
    own, bytes pushed, partitions beyond each tensor's first): CPU = 2·bytes·b +
    partitions·c for both. Where the second cuts nothing (one server), or the two do not
    tell b from c, c stays `default_per_partition` and b follows from the first."""
    (r1, bytes1, k1), (r2, bytes2, k2) = big, cut
    a1, a2 = 2.0 * bytes1, 2.0 * bytes2
    per_partition = default_per_partition
    det = a1 * k2 - a2 * k1
    if k2 > 0 and det > 0:
        per_partition = max(0.0, (a1 * r2 - a2 * r1) / det)
    return max(0.0, r1 - k1 * per_partition) / a1, per_partition

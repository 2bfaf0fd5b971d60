"""What the automatic plan measures on the running cluster, once (or on request):

- the link: a tiny and a 16 MiB push_pull through the real transport (the engine, the
  servers, the sockets or shared memory the job uses), the median of a few; latency = the
  tiny one's time, bandwidth = the bytes per direction the cost model says the big one moves
  through the busiest link, over the time it adds;
- each codec's CPU cost per byte and the float32 sum's (the C++ core's own loops, timed by
  `_core.time_codec` / `time_decode_add` where that binding is built; else the defaults
  of cost.Machine, and the report says so);
- the compute rate: a float32 matmul in TensorFlow, multiply-adds per second, alone and
  while push_pulls run beside it (the fraction lost: the cores that communication takes
  from compute, large on one host over loopback);
- the host's CPU budget, for the step's CPU floor (steptime.host_cpu): the transport's
  CPU per byte (this worker's process CPU during the same probes), per message (32
  tiny push_pulls in one tf.function against one) and per partition the engine cuts a
  tensor into (32 tensors of 128 KiB against 32 tiny ones: tensor_probe), SFB's rebuild
  rate (a real factor exchange, its CPU per multiply-add: sfb_probe.py), and the cores
  per host (this machine's cores over the job's hosts on it: hosts emulated on one
  machine, told apart by the kernel's boot id, share its cores).

Every worker must call `measure_cluster` at the same point (it runs collectives); rank 0's
numbers are broadcast, so every worker makes the same plan. The worker's optimizer update
is probed apart: update_probe.py.
"""

import dataclasses
import importlib
import logging
import os
import time
import zlib

import numpy as np

from tf_ps_ops.plan import cost, sfb_probe, tensor_probe

_logger = logging.getLogger("tf_ps_ops.plan")
# Large enough that the copies of a push_pull (the worker's buffers, the servers' sums) do
# not stay in a CPU's last-level cache, as a model's large gradients do not: a 4 MiB probe
# measured 2.7 times the bandwidth 16 MiB gradients got on one host (L3 32 MiB). The
# median, not the best, as the step it predicts is a median.
PROBE_BYTES = 16 << 20
_cache = {}


@dataclasses.dataclass(frozen=True)
class Measurements:
    """cluster, machine: the cost model's inputs, measured. one_machine_hierarchical: every
    worker runs on this one machine and hierarchical aggregation is on (the plan then keeps
    the default configuration: auto._plans)."""
    cluster: cost.Cluster
    machine: cost.Machine
    codecs_measured: bool
    one_machine_hierarchical: bool = False

    def describe(self):
        c, m = self.cluster, self.machine
        return (f"measured: link {c.bandwidth * 8 / 1e9:.3g} Gbit/s per direction, latency "
                f"{c.latency * 1e6:.0f} us, compute {m.macs_per_s / 1e9:.3g} "
                f"GMAC/s ({m.compute_loss:.0%} of it lost while communicating, its "
                f"kernels' CPU +{m.compute_cpu_loss:.0%} then), "
                f"{m.cores_per_host:.3g} cores per host, transport CPU "
                f"{m.transport_per_byte * 1e9:.3g} ns/byte, "
                f"{m.transport_per_message * 1e6:.3g} us/message and "
                f"{m.transport_per_partition * 1e6:.3g} us/partition, TensorFlow "
                f"{m.tf_per_op * 1e6:.3g} us per collective op, "
                f"{m.apply_per_row * 1e9:.3g} ns per gathered row's update, SFB rebuild "
                f"{m.rebuild_rate / 1e9:.3g} GMAC/s + {m.rebuild_per_element * 1e9:.3g} "
                f"ns per element and worker, codec costs "
                f"{'measured' if self.codecs_measured else 'assumed (no _core binding)'}")


def one_machine_hierarchical(size, local_size, hierarchical):
    """Whether the job's workers all run on one machine and hierarchical aggregation sums
    them there first. The cost model counts each worker on one machine as a host of its
    own (topology), so it prices summation as if every worker pushed its own gradients;
    under hierarchical aggregation one local leader pushes for all of them. On 3 workers
    and 3 servers of one 2-core machine, the DLRM-like model's plan that gave 3 kernels to
    the servers (PS mode skips the local sum) ran 1.3-1.4 times as long per step as
    summation, and the same as summation with TFPS_HIERARCHICAL=0."""
    return bool(hierarchical) and size > 1 and size // max(1, local_size) <= 1


def topology(size, local_size, num_servers):
    """The cost model's Cluster for the running job (bandwidth and latency left at their
    defaults). On one host every worker's bytes cross the loopback transport: each worker
    counts as its own host and the servers as dedicated ones."""
    hosts = max(1, size // max(1, local_size))
    if hosts == 1:
        return cost.Cluster(size, 1, 1, num_servers)
    if num_servers % hosts == 0:
        return cost.Cluster(size, local_size, num_servers // hosts)
    return cost.Cluster(size, local_size, 1, num_servers)


def _time_push_pull(ops, tf, array, name, repeats):
    """(median seconds, median CPU-seconds of this process, fastest seconds) of one
    push_pull of `array`, run as training runs it: in a tf.function, its answer left in
    the graph (eagerly, the answer's copy out to NumPy made a 16 MiB probe take twice the
    time per byte of the same gradients in `fit`)."""
    tensor = tf.constant(array)
    once = tf.function(lambda: ops.allreduce(tensor, name=name)[:1])
    once().numpy()  # traces; the first call registers the key
    times, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        once().numpy()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return float(np.median(times)), float(np.median(cpu)), float(min(times))


def host_sharing(ops, tf, name):
    """(this machine's cores, how many of the job's hosts run on it). A host is what the
    cost model calls one (topology: a local_size group of ranks, or each rank on one
    machine); hosts on the same machine (network namespaces, containers) share its kernel's
    boot id. Collective."""
    from tf_ps_ops.common import basics

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            machine = zlib.crc32(f.read().strip())
    except OSError:
        import socket
        machine = zlib.crc32(socket.gethostname().encode())
    size, local = basics.size(), max(1, basics.local_size())
    host = basics.rank() if size // local <= 1 else basics.rank() // local
    mine = tf.constant([[machine, host]], tf.int64)
    every = ops.allgather(mine, name=name).numpy()
    return cores, len({int(h) for m, h in every if int(m) == machine})


def codec_costs(elements=1 << 20, repeat=3):
    """((codec, (encode, decode, decode_add) seconds per float32 byte), ...), or None
    without the _core binding."""
    try:
        core = importlib.import_module("tf_ps_ops._core")
    except ImportError:
        return None
    data = np.random.default_rng(0).normal(size=elements).astype(np.float32)
    nbytes = 4.0 * elements
    total, best_sum = data.copy(), float("inf")
    for _ in range(repeat):  # the server's float32 sum of a push into its total
        start = time.perf_counter()
        np.add(total, data, out=total)
        best_sum = min(best_sum, time.perf_counter() - start)
    table = []
    for codec in cost.CODECS:
        codec_id = core.CODECS[codec]
        encode, decode = core.time_codec(codec_id, data, 0, repeat)
        if codec == "none":
            decode_add = best_sum
        elif core.codec_decodes_adding(codec_id):
            decode_add = core.time_decode_add(codec_id, data, repeat)
        else:  # decoded, then added
            decode_add = decode + best_sum
        table.append((codec, (encode / nbytes, decode / nbytes, decode_add / nbytes)))
    return tuple(table)


def compute_rate(tf, n=512, repeat=3):
    a = tf.random.normal([n, n])
    tf.linalg.matmul(a, a).numpy()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        tf.linalg.matmul(a, a).numpy()
        best = min(best, time.perf_counter() - start)
    return n ** 3 / best


def compute_loss(ops, tf, array, name, repeats=8, n=256):
    """The fraction of its matmul rate this worker loses while `repeats` push_pulls of
    `array` run beside it, in a thread: on one host the transport's copies and the
    servers' sums take the cores the model computes on (on separate hosts, less).
    The rate alone is the better of before and after. Collective: every worker calls it
    at the same point."""
    tensor = tf.constant(array)
    a = tf.random.normal([n, n])
    tf.linalg.matmul(a, a).numpy()

    def alone(count=repeats):
        start = time.perf_counter()
        for _ in range(count):
            tf.linalg.matmul(a, a).numpy()
        return count / (time.perf_counter() - start)

    once = tf.function(lambda: ops.allreduce(tensor, name=name)[:1])  # as _time_push_pull
    before = alone()
    start = time.perf_counter()
    finished, _ = beside_push_pulls(once, repeats, lambda: tf.linalg.matmul(a, a).numpy(),
                                    "tfps-plan-probe")
    busy = len(finished) / ((finished[-1] if finished else time.perf_counter()) - start)
    return min(1.0, max(0.0, 1.0 - busy / max(before, alone())))


def beside_push_pulls(once, count, work, thread_name):
    """Calls `work` again and again while `count` calls of `once` (a tf.function of a
    push_pull) run in a thread: ([when each call of `work` ended], when the push_pulls
    ended), perf_counter seconds. A push_pull's error is raised here."""
    import threading

    failure, ended = [], []

    def communicate():
        try:
            for _ in range(count):
                once().numpy()
        except Exception as error:  # raised again on the calling thread
            failure.append(error)
        finally:
            ended.append(time.perf_counter())

    thread = threading.Thread(target=communicate, name=thread_name)
    finished = []
    thread.start()
    while thread.is_alive():
        work()
        finished.append(time.perf_counter())
    thread.join()
    if failure:
        raise failure[0]
    return finished, ended[0]


def measure_cluster(refresh=False, repeats=5):
    """Measurements of this job (cached; refresh=True measures again). Collective."""
    if "last" in _cache and not refresh:
        return _cache["last"]
    import tensorflow as tf

    from tf_ps_ops.collectives import ops
    from tf_ps_ops.common import basics

    from tf_ps_ops.common import library

    hierarchical = bool(library.c_api().tfps_hierarchical())
    shape = dataclasses.replace(
        topology(basics.size(), basics.local_size(), basics.num_servers()),
        hierarchical=hierarchical)
    round_ = _cache.get("round", 0)
    _cache["round"] = round_ + 1
    small, small_cpu, small_best = _time_push_pull(ops, tf, np.zeros(1, np.float32),
                                                   f"tfps.plan.probe{round_}.small", repeats)
    _, big_cpu, big_best = _time_push_pull(ops, tf, np.zeros(PROBE_BYTES // 4, np.float32),
                                           f"tfps.plan.probe{round_}.big", repeats)
    per_direction = cost._server_link(PROBE_BYTES, shape, False)
    # The link's rate is what the fastest of the probes reached: a slower one met a busy
    # core (one tensor at a time, where a step's many keep the link fed). Three emulated
    # hosts at 1 Gbit/s, idle: the best of 5 read 113-118 MB/s in six rounds, the median
    # 107-113, and a link-bound step moved 112 MB/s where the median had read 99.6.
    bandwidth = per_direction / max(big_best - small_best, 1e-6)
    # A push_pull is a push and a pull (cost.LayerCost.host_messages); this worker sends
    # and receives the probe's bytes once each, in the partitions the engine cuts them.
    per_byte, per_message, per_partition = tensor_probe.transport_costs(
        ops, tf, f"tfps.plan.transport{round_}", repeats, (big_cpu, PROBE_BYTES),
        (small_cpu, 4), shape.servers, int(os.environ.get("TFPS_PARTITION_BYTES", 1 << 20)))
    cores, sharing = host_sharing(ops, tf, f"tfps.plan.hosts{round_}")
    rebuild, rebuild_fixed = sfb_probe.sfb_rebuild_costs(tf, f"tfps.plan.sfb{round_}") \
        or (0.0, 0.0)
    codecs = codec_costs()
    rate = compute_rate(tf)
    loss = compute_loss(ops, tf, np.zeros(PROBE_BYTES // 4, np.float32),
                        f"tfps.plan.probe{round_}.big")
    flat = [bandwidth, small, rate, loss, per_byte, per_message, cores / sharing, rebuild,
            rebuild_fixed, per_partition] + [v for _, costs in (codecs or ()) for v in costs]
    # Rank 0's numbers for everyone: the plan must be the same on every worker.
    flat = ops.broadcast(tf.constant(flat, tf.float64), 0,
                         name=f"tfps.plan.measured{round_}.{len(flat)}").numpy().tolist()
    bandwidth, latency, rate, loss, per_byte, per_message, cores_per_host, rebuild, \
        rebuild_fixed, per_partition = flat[:10]
    table = ()
    if codecs:
        values = iter(flat[10:])
        table = tuple((name, (next(values), next(values), next(values)))
                      for name, _ in codecs)
    cluster = dataclasses.replace(shape, bandwidth=bandwidth, latency=latency)
    machine = cost.Machine(macs_per_s=rate, codec_per_byte=table,
                           sum_per_byte=dict(table).get("none", (0, 0, 0.1e-9))[2],
                           compute_loss=loss, cores_per_host=cores_per_host,
                           transport_per_byte=per_byte, transport_per_message=per_message,
                           transport_per_partition=per_partition,
                           **_table_partition_costs(),
                           rebuild_rate=rebuild or cost.Machine().rebuild_rate,
                           rebuild_per_element=rebuild_fixed)
    result = Measurements(cluster, machine, bool(codecs), one_machine_hierarchical(
        basics.size(), basics.local_size(), hierarchical))
    _cache["last"] = result
    if basics.rank() == 0:
        _logger.info("%s", result.describe())
    return result


def _table_partition_costs():
    """PS mode's CPU per untouched partition of a table, a worker's and a server's: the
    defaults measured under ZeroMQ CURVE where the job has a key (TFPS_AUTH_KEY_FILE),
    else those over plain TCP."""
    if os.environ.get("TFPS_AUTH_KEY_FILE"):
        return dict(partition_cpu=cost.PARTITION_CPU,
                    server_partition_cpu=cost.SERVER_PARTITION_CPU)
    return dict(partition_cpu=cost.PLAIN_PARTITION_CPU,
                server_partition_cpu=cost.PLAIN_SERVER_PARTITION_CPU)


def rank0_value(value, name):
    """Rank 0's float for every worker (a broadcast outside any tf.function being traced):
    what a plan is made from must be the same everywhere. Collective."""
    import tensorflow as tf

    from tf_ps_ops.collectives import ops

    with tf.init_scope():
        return float(ops.broadcast(tf.constant([value], tf.float64), 0, name=name)
                     .numpy()[0])

"""What the cost model (cost.py) knows of the cluster and the machine: the hosts, their
link and servers (`Cluster`); the CPU and compute rates and prices that measure.py
measures on the job (`Machine`, with the defaults the benchmarks measured); and how the
engine cuts a tensor into partitions and how many bytes a codec puts on the wire."""

import dataclasses
import math

CODECS = ("none", "fp16", "bf16", "int8", "onebit")
CHUNK = 1024  # elements per codec chunk (cc/codec's kChunk)


@dataclasses.dataclass(frozen=True)
class Cluster:
    """workers: P1. bandwidth: bytes/s per direction of a host's link. latency: seconds
    of a tiny push_pull's round trip. dedicated_servers: 0 for servers on the worker
    hosts (servers_per_host each), else the number of server machines."""
    workers: int
    workers_per_host: int = 1
    servers_per_host: int = 1
    dedicated_servers: int = 0
    bandwidth: float = 1.25e9
    latency: float = 50e-6
    hierarchical: bool = True

    def __post_init__(self):
        for name in ("workers", "workers_per_host", "servers_per_host"):
            if getattr(self, name) < 1:
                raise ValueError(f"Cluster.{name} = {getattr(self, name)}: must be >= 1")
        if self.bandwidth <= 0 or self.latency < 0:
            raise ValueError(f"bandwidth {self.bandwidth} B/s and latency {self.latency} s: "
                             f"the bandwidth must be > 0 and the latency >= 0")

    @property
    def hosts(self):
        return math.ceil(self.workers / self.workers_per_host)

    @property
    def servers(self):
        return self.dedicated_servers or self.hosts * self.servers_per_host


# benchmarks/results/ps_sparse_partitions.md: an untouched partition of a table in PS mode,
# under ZeroMQ CURVE (every message encrypted, as in tfps-run's jobs); over plain TCP
# (ps_sparse_partitions_plain.md, the same day) a third to a half of it.
PARTITION_CPU = 3.2e-6
SERVER_PARTITION_CPU = 3.5e-6
PLAIN_PARTITION_CPU = 1.1e-6
PLAIN_SERVER_PARTITION_CPU = 1.7e-6
# benchmarks/results/tensor_cpu_2h_10gbit.md: a worker's CPU per partition the engine cuts
# a tensor into beyond its first (measure.measure_cluster measures it on the job).
TRANSPORT_PER_PARTITION = 55e-6
# The engine's kMinSplitBytes (cc/engine/partition.cc): a larger tensor is cut into at
# most one server's share, so that every server's link carries part of it.
MIN_SPLIT_BYTES = 64 * 1024
# benchmarks/results/ps_dense_variables.md: a dense variable in PS mode beyond summation,
# on the servers, per worker's push.
SERVER_PS_VARIABLE_CPU = 43.5e-6


@dataclasses.dataclass(frozen=True)
class Machine:
    """CPU and compute rates. Codec costs are seconds per float32 byte of the tensor:
    {codec: (encode, decode, decode-add)}; sum_per_byte is a float32 add of one byte's
    worth; local_per_byte the host's local sum under hierarchical aggregation, per byte
    and local peer (shared memory and a CPU add here; NVLink for GPUs); rebuild_rate is
    SFB's multiply-adds per second and rebuild_per_element its seconds per element of
    the N×M gradient per worker whose factors it adds, whatever K (its loads and stores:
    a rebuild of K factors costs N·M·P·(K / rebuild_rate + rebuild_per_element), so a
    probe at small K, extrapolated by its multiply-adds alone, overcounts a large K);
    macs_per_s the model's forward rate (backward costs
    backward_ratio times the forward; the first layer's, which computes no gradient for
    the model's input, one forward less). compute_loss: the fraction of its speed
    compute loses while communication runs beside it (0: the link and the servers use no
    core the model needs; measure.measure_cluster measures it; where cores_per_host is
    known the step runs on those cores beside the transport instead, hoststep.py);
    compute_cpu_loss: the fraction of CPU the compute's kernels take in addition while
    the link is busy (the transport's copies pass through the caches they work in:
    profile.model_compute_loss measures both with the model's own step).
    apply_per_byte: the worker's optimizer update of a layer once its gradient is back,
    per parameter byte, one layer after another (none in PS mode, where the servers
    update; update_probe.apply_cost measures a plain SGD update,
    update_probe.optimizer_cost the job's optimizer). apply_per_row: that update of one
    row of an embedding's gathered rows (a tf.IndexedSlices, every worker's after a
    gather), apply_row_width floats wide (update_probe.sparse_apply_cost; a row of another
    width costs in proportion); 0: unknown, the row costs a float add per element
    (sum_per_byte)."""
    macs_per_s: float = 5e12
    backward_ratio: float = 2.0
    codec_per_byte: tuple = ()          # ((codec, (encode, decode, decode_add)), ...)
    sum_per_byte: float = 0.1e-9
    rebuild_rate: float = 1.5e10
    rebuild_per_element: float = 0.0
    message_overhead: float = 20e-6
    server_threads: int = 2
    local_per_byte: float = 0.2e-9  # hierarchical: add one local peer's byte and copy back
    compute_loss: float = 0.0  # fraction of compute speed lost while the link is busy
    compute_cpu_loss: float = 0.0  # extra CPU of the compute's kernels while it is busy
    apply_per_byte: float = 0.0  # the worker's optimizer update, per parameter byte
    apply_per_row: float = 0.0  # its update of a gathered embedding row (0: unknown)
    apply_row_width: int = 0  # the floats per row apply_per_row was measured at
    # CPU-seconds a worker's TensorFlow threads (and Python's main thread) spend per
    # collective op of its step beyond the transport's prices: the op's kernel, the
    # averaging, the hand-offs between threads (profile.sync_op_cpu measures it in the
    # model's own step; 0: unknown)
    tf_per_op: float = 0.0
    # The host's CPU budget (0: unknown, no CPU floor under the step); the transport's CPU
    # per byte sent or received and per message, by a worker or a server; the cores the
    # model's compute keeps busy while it runs (TensorFlow's intra-op threads).
    cores_per_host: float = 0.0
    transport_per_byte: float = 0.0
    transport_per_message: float = 0.0
    compute_cpu: float = 1.0
    # per partition the engine cuts a tensor into beyond its first (partition_count),
    # by a worker or a server: a tensor of one partition costs transport_per_message
    # and its bytes, one cut in two this more (most of it ZeroMQ's I/O thread)
    transport_per_partition: float = TRANSPORT_PER_PARTITION
    # PS mode's sparse updates: every partition of an embedding table gets a push per
    # worker and step, rows or none, and a reply. CPU-seconds per partition beyond its
    # rows, a worker's (its push and the reply) and a server's (per worker's push and its
    # reply); benchmarks/ps_sparse_partitions.py measured these defaults.
    partition_cpu: float = PARTITION_CPU
    server_partition_cpu: float = SERVER_PARTITION_CPU
    # PS mode's dense variables: each is pushed and pulled on its own (summation fuses
    # small ones) and updated on its own by the servers. A server's CPU-seconds per
    # variable and worker's push beyond what summation spends on it and beyond the
    # update's bytes (apply_per_byte); benchmarks/ps_dense_variables.py measured the
    # default. (The worker spends less per variable than in summation, by the update it
    # no longer runs, which apply_per_byte counts.)
    server_ps_variable_cpu: float = SERVER_PS_VARIABLE_CPU

    def row_add(self, width):
        """CPU seconds of the worker's update of one gathered row `width` floats wide:
        apply_per_row where it was measured, else a float add per element."""
        if self.apply_per_row > 0 and self.apply_row_width > 0:
            return self.apply_per_row * width / self.apply_row_width
        return 4 * width * self.sum_per_byte

    def codec(self, name):
        table = dict(self.codec_per_byte)
        if name == "none":
            return (0.0, 0.0, table.get("none", (0, 0, self.sum_per_byte))[2])
        return table.get(name, _DEFAULT_CODEC_COST.get(name, (0.5e-9, 0.5e-9, 0.6e-9)))


# Seconds per float32 byte, from docs/compression.md's speed table order of magnitude;
# measure.codec_costs() replaces them with this machine's.
_DEFAULT_CODEC_COST = {"fp16": (0.15e-9, 0.1e-9, 0.15e-9), "bf16": (0.1e-9, 0.1e-9, 0.15e-9),
                       "int8": (0.4e-9, 0.2e-9, 0.3e-9), "onebit": (0.4e-9, 0.2e-9, 0.3e-9)}
FREE = Machine(macs_per_s=math.inf, codec_per_byte=tuple(
    (c, (0.0, 0.0, 0.0)) for c in CODECS), sum_per_byte=0.0, rebuild_rate=math.inf,
    message_overhead=0.0, local_per_byte=0.0, partition_cpu=0.0, server_partition_cpu=0.0,
    server_ps_variable_cpu=0.0, transport_per_partition=0.0)


def partition_count(raw, partition_bytes, servers):
    """How many partitions the engine cuts a float32 tensor of `raw` bytes into
    (PartitionTensor): of at most partition_bytes, and a tensor over MIN_SPLIT_BYTES of at
    most one server's share."""
    elements = max(1, raw // 4)
    per_part = max(1, partition_bytes // 4)
    if servers > 1 and raw > MIN_SPLIT_BYTES:
        per_part = min(per_part, max(MIN_SPLIT_BYTES // 4, -(-elements // servers)))
    return -(-elements // per_part)


def wire_bytes(codec, elements, partition_elements):
    """Bytes a tensor of `elements` float32 takes on the wire, cut into partitions."""
    if codec == "none":
        return 4 * elements
    if codec in ("fp16", "bf16"):
        return 2 * elements
    full, rest = divmod(elements, max(1, partition_elements))
    parts = [partition_elements] * full + ([rest] if rest else [])
    if codec == "int8":
        return sum(n + 8 * math.ceil(n / CHUNK) for n in parts)
    if codec == "onebit":
        return sum(math.ceil(n / 8) + 4 * math.ceil(n / CHUNK) for n in parts)
    raise ValueError(f"codec {codec!r}: the planner knows {', '.join(CODECS)}")

"""The cost model: how long a layer's synchronisation takes in each mode, and a step.

Poseidon's HybComm counts floats through the busiest node (`ps_cost`, `sfb_cost`, kept
here as the published formulas and used by sfb.policy). The planner generalises it to
time, per layer and mode, on the busiest host's link (bytes per direction; links are full
duplex):

  summation / PS, servers colocated (H hosts, L workers and s servers per host,
  P1 = H·L workers, P2 = H·s servers):   W·(L·(P2−s) + s·(P1−L)) / P2
      with L = 1 workers per host when hierarchical aggregation sums each host first.
      One server per host and L = 1: 2·W·(H−1)/H, BytePS's all-reduce bound, and
      HybComm's 2·M·N·(P1+P2−2)/P2 floats sent + received for P1 = P2.
  summation / PS, D dedicated server machines:   max(L·W, P1·W/D)   (worker or server host)
  SFB: L·(P1−L)·F with F = 4·K·(M+N) bytes of factors per worker (K rows per step)

An embedding's gradient (a tf.IndexedSlices of R rows per worker, width C) travels
  gather (the engine's default): an allgather of every worker's rows and indices,
      L·(P1−L)·R·(4·C + 4): it grows with the workers
  sum: reduced dense (sparse_as_dense), the table's bytes as above: flat in the workers
  PS, optimizer that updates rows only (plain SGD, Adagrad): each worker pushes its
      distinct rows u and pulls the union U of every worker's (int64 ids), split over the
      servers: U grows with the workers until it covers the rows looked up (the reach);
      every partition of the table is a push and a reply, rows or none, whose CPU
      (Machine.partition_cpu, server_partition_cpu) grows with the table
  PS, optimizer with slots every row's update moves (momentum, Adam): dense
  SFB: not applicable (no Dense kernel).

W is the layer's bytes on the wire after its codec (per partition: `wire_bytes`). CPU
time adds to a layer's completion: codec encode/decode on the worker, decode-add and
re-encode on the servers, the host's local sum under hierarchical aggregation, SFB's
rebuild (N·M·K·P1 multiply-adds, plus a cost per element of the N×M result for each
worker's factors, whatever K). steptime.py places it all on one step's timeline.
"""

import dataclasses
import math

# The cluster, the machine and the engine's cut (machine.py), part of this module's API.
from tf_ps_ops.plan.machine import (  # noqa: F401
    CHUNK, CODECS, FREE, MIN_SPLIT_BYTES, PARTITION_CPU, PLAIN_PARTITION_CPU,
    PLAIN_SERVER_PARTITION_CPU, SERVER_PARTITION_CPU, SERVER_PS_VARIABLE_CPU,
    TRANSPORT_PER_PARTITION, Cluster, Machine, partition_count, wire_bytes)

SFB, SUM, PS_DENSE, GATHER = "sfb", "sum", "ps", "gather"
MODES = (SUM, SFB, PS_DENSE, GATHER)
GATHER_INDEX_BYTES = 4  # Keras' int32 ids: the IndexedSlices' indices as gathered
PS_INDEX_BYTES = 8  # the PS wire's int64 row ids (docs/ps_mode.md)


# ---------------------------------------------------------------------------------------
# HybComm (Poseidon, ATC'17): floats sent + received per step by the busiest node


def ps_cost(m, n, workers, servers, colocated=True):
    """Floats per step through the busiest node when the servers hold the M×N layer."""
    if colocated:
        return 2 * m * n * (workers + servers - 2) / servers
    return max(2 * m * n, 2 * workers * m * n / servers)


def sfb_cost(m, n, k, workers):
    """Floats per step each worker sends and receives: its K×(M+N) factors to every peer,
    and every peer's to it."""
    return 2 * k * (workers - 1) * (m + n)


# ---------------------------------------------------------------------------------------
# One layer in one mode


@dataclasses.dataclass(frozen=True)
class Choice:
    mode: str = SUM
    codec: str = "none"

    def __str__(self):
        return self.mode if self.codec == "none" else f"{self.mode}+{self.codec}"


def parse_choice(text):
    """'sum', 'sfb', 'ps', 'sum+int8', ... -> Choice."""
    mode, _, codec = str(text).partition("+")
    if mode not in MODES or (codec or "none") not in CODECS or (
            codec and mode in (SFB, GATHER)):
        raise ValueError(f"choice {text!r}: use sum, sfb, ps or gather (embeddings), "
                         f"optionally sum+CODEC or ps+CODEC with CODEC one of "
                         f"{', '.join(CODECS[1:])}")
    return Choice(mode, codec or "none")


def default_choice(layer):
    """What the engine does unplanned: gather an embedding's rows, sum the rest."""
    return Choice(GATHER) if layer.sparse else Choice()


@dataclasses.dataclass(frozen=True)
class LayerCost:
    """link_bytes: per direction through the busiest host. messages: how many.
    cpu_before: worker time before the first byte leaves. cpu_after: time after the
    last byte arrives (servers' and workers' decoding, local sums, SFB's rebuild).
    The busiest host's totals per step, for its CPU floor: host_cpu, CPU-seconds of its
    workers' and servers' codecs, sums, updates and rebuilds, and of the partitions the
    engine cuts a tensor into beyond its first (Machine.transport_per_partition); host_bytes,
    the bytes its processes send plus receive (loopback included); host_messages, the
    collectives its processes take part in (each costs Machine.transport_per_message, as
    the tiny probe push_pull does; fused tensors one collective each).
    reply_bytes: of link_bytes, the servers' replies. With servers beside the workers, a
    host's link carries its workers' pushes to other hosts' servers and its servers'
    replies to other hosts' workers: a partition's reply leaves once its pushes are in,
    on a link as busy as this one (the hosts are alike), so it shares that link with the
    pushes (steptime's timeline) instead of following its own push as tail_bytes."""
    link_bytes: float
    messages: int
    tail_bytes: float
    cpu_before: float
    cpu_after: float
    host_cpu: float = 0.0
    host_bytes: float = 0.0
    host_messages: float = 0.0
    reply_bytes: float = 0.0
    worker_ops: float = 0.0  # the collective ops one worker's step runs for the layer


def collective_ops(layer, choice):
    """The collective ops a worker's step runs for `layer` synchronised by `choice`: one
    per variable summed or pushed (fused or not, each is its own op in the step), one for
    an embedding's rows (gathered, or pushed in PS mode) and one for SFB's factors (its
    bias summed beside them). Each costs the worker's TensorFlow threads
    Machine.tf_per_op."""
    if layer.params == 0:
        return 0
    if _moves_rows(layer, choice):
        return 1
    if choice.mode == SFB:
        return 1 + (layer.variables - 1 if layer.kernel and layer.params > layer.kernel[0]
                    * layer.kernel[1] else 0)
    return layer.variables


def _server_link(w, cluster, hierarchical):
    return _server_shares(w, cluster, hierarchical)[0]


def _server_shares(w, cluster, hierarchical):
    """(bytes per direction through the busiest host when each worker (or host leader)
    pushes and pulls `w`, of them the replies of this host's servers to other hosts'
    workers: none from dedicated server machines, which reach the workers' other
    direction)."""
    per_host = 1 if hierarchical else cluster.workers_per_host
    workers = cluster.hosts * per_host if hierarchical else cluster.workers
    if cluster.dedicated_servers:
        return max(per_host * w, workers * w / cluster.dedicated_servers), 0.0
    s, p2 = cluster.servers_per_host, cluster.servers
    return (w * (per_host * (p2 - s) + s * (workers - per_host)) / p2,
            w * s * (workers - per_host) / p2)


def layer_cost(layer, choice, cluster, machine, batch_size, partition_bytes):
    """The LayerCost of `layer` synchronised by `choice`."""
    if cluster.workers == 1 or layer.params == 0:
        return LayerCost(0.0, 0, 0.0, 0.0, 0.0)
    return dataclasses.replace(
        _layer_cost(layer, choice, cluster, machine, batch_size, partition_bytes),
        worker_ops=collective_ops(layer, choice))


def _moves_rows(layer, choice):
    """Whether `choice` sends `layer`'s gradient as rows: gathered, or pushed to the servers
    in PS mode by an optimizer that updates rows (uncompressed)."""
    return choice.mode == GATHER or (layer.sparse and choice.mode == PS_DENSE and
                                     layer.row_update and choice.codec == "none")


def _layer_cost(layer, choice, cluster, machine, batch_size, partition_bytes):
    p1 = cluster.workers
    if _moves_rows(layer, choice):
        return _sparse_cost(layer, choice, cluster, machine, batch_size, partition_bytes)
    if choice.mode == SFB:
        if layer.kernel is None or layer.rows is None:
            raise ValueError(f"layer {layer.name!r}: SFB needs a Dense kernel with a known "
                             f"number of rows per example")
        n, m = layer.kernel
        k = batch_size * layer.rows
        L = min(cluster.workers_per_host, p1)
        factors = 4 * k * (n + m)
        bias = LayerCost(0, 0, 0, 0, 0)
        if layer.params > n * m:  # the bias (and any other weight) by summation
            bias = _summed(4 * (layer.params - n * m), Choice(), cluster, machine,
                           partition_bytes)
        rebuild = n * m * p1 * (k / machine.rebuild_rate + machine.rebuild_per_element)
        # Each worker sends its factors once and receives every peer's, which arrive
        # while it sends (the peers send theirs at the same time): no tail.
        return LayerCost(L * (p1 - L) * factors + bias.link_bytes, (p1 - 1) + bias.messages,
                         bias.tail_bytes, bias.cpu_before, max(rebuild, bias.cpu_after),
                         host_cpu=L * rebuild + bias.host_cpu,
                         host_bytes=L * p1 * factors + bias.host_bytes,
                         host_messages=L * p1 + bias.host_messages,
                         reply_bytes=bias.reply_bytes)
    summed = _summed(layer.bytes, choice, cluster, machine, partition_bytes)
    if choice.mode == PS_DENSE:  # each variable's push and update on its own
        server = p1 * layer.variables / cluster.servers * machine.server_ps_variable_cpu
        _, s = _per_host(cluster)
        summed = dataclasses.replace(summed, cpu_after=summed.cpu_after + server,
                                     host_cpu=summed.host_cpu + s * server)
    if layer.sparse:  # the IndexedSlices made dense first
        summed = dataclasses.replace(
            summed, cpu_before=summed.cpu_before + layer.bytes * machine.sum_per_byte)
    return summed


def _sparse_cost(layer, choice, cluster, machine, batch_size, partition_bytes):
    """An embedding's IndexedSlices gathered, or its rows through the servers."""
    if not layer.sparse:
        raise ValueError(f"layer {layer.name!r}: 'gather' applies to an embedding whose "
                         f"gradient is a tf.IndexedSlices; {layer.name!r} is {layer.kind}")
    rows = layer.rows_per_step(batch_size)
    if rows is None:
        raise ValueError(f"layer {layer.name!r}: the rows its gradient has per step are "
                         f"unknown (a variable sequence length): give them (step_rows; "
                         f"tfps-plan --step-rows {layer.name}=ROWS)")
    p1, width = cluster.workers, layer.table[1]
    # One scatter-add of the rows per worker that sends them (or of the union, in PS).
    add = 4 * width * machine.sum_per_byte
    if choice.mode == GATHER:
        # The worker's optimizer updates every worker's rows, its own included.
        add = machine.row_add(width)
        sent = rows * (4 * width + GATHER_INDEX_BYTES)
        L = min(cluster.workers_per_host, p1)
        return LayerCost(L * (p1 - L) * sent, p1 - 1, 0.0, 0.0, p1 * rows * add,  # as SFB
                         host_cpu=L * p1 * rows * add, host_bytes=L * p1 * sent,
                         host_messages=L * p1)
    row = 4 * width + PS_INDEX_BYTES
    pushed = layer.distinct_rows(rows) * row
    pulled = layer.distinct_rows(p1 * rows) * row
    # Every partition of the table gets a push per worker and step, empty if untouched,
    # and a reply: CPU on the worker's engine thread and on the servers' I/O threads, not
    # bytes on the link (the rows travel as one piece).
    partitions = max(1, math.ceil(layer.bytes / partition_bytes))
    worker_partitions = partitions * machine.partition_cpu
    server_partitions = p1 * partitions / cluster.servers * machine.server_partition_cpu
    server = p1 * pushed / cluster.servers * machine.sum_per_byte / machine.server_threads
    L, s = _per_host(cluster)
    link, reply = _rows_link(pushed, pulled, cluster)
    return LayerCost(link, 1, pulled if cluster.dedicated_servers else 0.0, worker_partitions,
                     server + server_partitions + pulled / row * add,
                     host_cpu=L * (pulled / row * add + worker_partitions)
                     + s * (server * machine.server_threads + server_partitions),
                     host_bytes=(L + s * p1 / cluster.servers) * (pushed + pulled),
                     host_messages=(L + s * p1 / cluster.servers) * 2, reply_bytes=reply)


def _rows_link(pushed, pulled, cluster):
    """(bytes per direction through the busiest host when each worker pushes `pushed`
    and pulls `pulled`, both spread over the servers (PS mode's flat path); of them the
    replies of this host's servers to other hosts' workers, as _server_shares)."""
    L = min(cluster.workers_per_host, cluster.workers)
    p1 = cluster.workers
    if cluster.dedicated_servers:
        d = cluster.dedicated_servers
        return max(L * max(pushed, pulled), p1 * max(pushed, pulled) / d), 0.0
    s, p2 = cluster.servers_per_host, cluster.servers
    replies = s * (p1 - L) * pulled
    out = (L * pushed * (p2 - s) + replies) / p2
    into = (s * (p1 - L) * pushed + L * pulled * (p2 - s)) / p2
    link = max(out, into)
    return link, min(link, replies / p2)


def _summed(raw, choice, cluster, machine, partition_bytes):
    elements = raw // 4
    part = max(1, partition_bytes // 4)
    wire = wire_bytes(choice.codec, elements, part)
    # Compressed tensors and PS mode's updates stay on the flat path (docs/hierarchical.md).
    hierarchical = (cluster.hierarchical and choice.codec == "none" and choice.mode == SUM
                    and cluster.workers_per_host > 1)
    encode, decode, decode_add = machine.codec(choice.codec)
    pushes = cluster.hosts if hierarchical else cluster.workers
    # A server decodes-and-adds every push of its share, then re-encodes the sum.
    server = raw / cluster.servers * (pushes * decode_add + encode) / machine.server_threads
    local = 0.0
    if hierarchical:  # the leader adds its host's tensors and hands the answer back
        local = raw * (cluster.workers_per_host - 1) * machine.local_per_byte
    partitions = max(1, math.ceil(raw / partition_bytes))
    L, s = _per_host(cluster)
    senders = 1 if hierarchical else L  # workers on the host that push and pull
    share = s * pushes / cluster.servers  # of every partition's pushes, this host's servers'
    server_cpu = s * raw / cluster.servers * (pushes * decode_add + encode)
    # The engine's cut, beyond a tensor's first partition, on both ends (the timeline's
    # pieces stay partition_bytes: how the link is shared, not what each costs the CPU).
    cut = (senders + share) * (partition_count(raw, partition_bytes, cluster.servers) - 1) \
        * machine.transport_per_partition
    if choice.mode == PS_DENSE:  # the servers update the parameters
        server_cpu += s * raw / cluster.servers * machine.apply_per_byte
    link, reply = _server_shares(wire, cluster, hierarchical)
    return LayerCost(link, partitions,
                     min(wire, wire / partitions) if cluster.dedicated_servers else 0.0,
                     raw * encode, server + raw * decode + local,
                     host_cpu=senders * raw * (encode + decode) + local + server_cpu + cut,
                     host_bytes=(senders + share) * 2 * wire,
                     host_messages=(senders + share) * 2, reply_bytes=reply)


def _per_host(cluster):
    """(workers, servers) on the busiest host; dedicated server machines hold none."""
    L = min(cluster.workers_per_host, cluster.workers)
    return L, 0 if cluster.dedicated_servers else cluster.servers_per_host

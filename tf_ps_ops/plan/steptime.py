"""One training step on a timeline, from the per-layer costs of cost.py.

`step_time` places a step's work on one timeline: backward produces gradients from the
last layer to the first (or when the real step had each ready: Layer.ready), the link
serves partitions (in ready order, or by priority — layers nearest the input first —
under a scheduling credit; with servers beside the workers, the servers' replies share
the link with the pushes), the worker updates each layer once its parameters are back,
and the next step starts once every layer's are.

A host's cores bound the step from below as its link does (`host_cpu`): per step, the
busiest host's processes spend the model's compute (times the cores it keeps busy) and
optimizer update for each of its L workers, every codec pass, the servers' sums and
updates, and the transport's CPU for each byte and message its workers and servers send
and receive. Where the machine knows its cores per host (Machine.cores_per_host, measured:
hosts emulated on one machine share its cores), that CPU runs on those cores beside the
link, on one timeline (hoststep.py: where the two bounds are close, each waits for the
other), and the step is at least that CPU time over the cores and one round trip (the
link's latency), which ends the step after the host's last work as it ends each layer on
the timeline.
"""

import dataclasses
import heapq

from tf_ps_ops.plan import hoststep
from tf_ps_ops.plan.cost import GATHER, PS_DENSE, SFB, layer_cost


@dataclasses.dataclass(frozen=True)
class Settings:
    """The engine's knobs: TFPS_PARTITION_BYTES, TFPS_FUSION_BYTES, TFPS_SCHEDULING_CREDIT."""
    partition_bytes: int = 1 << 20
    fusion_bytes: int = 1 << 18
    credit: int = 0


def compute_times(layers, machine, batch_size, choices=None):
    """(forward, backward) seconds per layer. The first layer's backward computes the
    gradient of its weights only: nothing asks for the gradient of the model's input.
    A layer synchronised by SFB (choices) skips its weights' gradient, one forward's
    worth of multiply-adds: the rebuild from every worker's factors, its own included,
    computes it (LayerCost's rebuild). What that saves is priced at the rebuild's
    measured rate (at most the forward's time): macs_per_s, fitted to a whole step, also
    carries work that is not multiply-adds (lookups, copies), which SFB does not skip."""
    forward = [layer.macs * batch_size / machine.macs_per_s for layer in layers]
    backward = [f * machine.backward_ratio for f in forward]
    if backward:
        backward[0] = forward[0] * max(0.0, machine.backward_ratio - 1)
    for index, choice in enumerate(choices or ()):
        if choice.mode == SFB:
            skipped = layers[index].macs * batch_size / machine.rebuild_rate
            backward[index] = max(0.0, backward[index] - min(forward[index], skipped))
    return forward, backward


def _has_ready_times(layers):
    """Every layer has its measured ready time (Layer.ready)."""
    return bool(layers) and all(layer.ready is not None for layer in layers)


def _messages(layers, costs, ready, settings):
    """[(ready, priority, link seconds-worth bytes, messages, layers it completes)] in
    the order the gradients are ready (backward's, unless the layers carry ready times);
    small summed layers ready one after another fuse up to fusion_bytes."""
    out, group = [], None
    order = list(reversed(range(len(layers))))
    if _has_ready_times(layers):
        order.sort(key=lambda index: ready[index])
    for index in order:
        cost = costs[index]
        if cost.messages == 0:
            continue
        small = cost.link_bytes and layers[index].bytes < settings.fusion_bytes and \
            cost.messages == 1
        if small and group and group["raw"] + layers[index].bytes <= settings.fusion_bytes:
            group["bytes"] += cost.link_bytes
            group["reply"] += cost.reply_bytes
            group["raw"] += layers[index].bytes
            group["ready"] = max(group["ready"], ready[index])
            group["priority"] = min(group["priority"], index)
            group["layers"].append(index)
            continue
        if group:
            out.append(group)
            group = None
        entry = dict(ready=ready[index], priority=index, bytes=cost.link_bytes,
                     reply=cost.reply_bytes, messages=cost.messages, raw=layers[index].bytes,
                     layers=[index])
        if small:
            group = entry
        else:
            out.append(entry)
    if group:
        out.append(group)
    return out


def step_time(layers, choices, cluster, machine, batch_size, settings=Settings()):
    """(predicted seconds per step, [per layer: its synchronisation's LayerCost,
    seconds from gradient ready to parameters back]). choices: one Choice per layer.

    Where the machine knows the host's cores (machine.cores_per_host > 0), the step runs
    on those cores and the link together (`shared_step`). Otherwise, where the machine
    loses compute to communication (machine.compute_loss > 0: the
    workers' transport, copies and servers share the cores with backward, as on one host
    over loopback), backward runs slower while the link is busy: the link's busy time
    inside backward, times compute_loss, is added to backward (a fixed point, found in a
    few rounds: longer backward, more of the link's time inside it). Where its kernels
    also take more CPU then (machine.compute_cpu_loss), the host's CPU floor counts that
    for the part of backward the link is busy in."""
    if machine.cores_per_host > 0:
        return shared_step(layers, choices, cluster, machine, batch_size, settings)
    costs, forward, backward, apply, done, ready, t_bwd_end, busy = _step(
        layers, choices, cluster, machine, batch_size, settings)
    # The worker updates each layer once its gradient is back, one after another.
    clock = 0.0
    for index in sorted(range(len(layers)), key=lambda i: done[i]):
        clock = max(clock, done[index]) + apply[index]
        done[index] = clock
    # The next step starts once every parameter is back and updated: a training step is
    # one tf.function call, which returns when all of its ops have run (no layer's
    # forward runs ahead into the next step while another layer's transfer finishes).
    step = max([t_bwd_end] + done)
    if machine.cores_per_host > 0:
        # The host's CPU over its cores, and then the last reply's round trip: as on the
        # timeline (a layer is back one latency after its bytes and their CPU), nothing is
        # left to overlap it with once the host's work is done.
        step = max(step, host_cpu(costs, forward, backward, apply, cluster, machine, busy)
                   / machine.cores_per_host + cluster.latency)
    return step, [(c, d - r) for c, d, r in zip(costs, done, ready)]


def _step(layers, choices, cluster, machine, batch_size, settings):
    """(costs, forward, backward, apply, done, ready, end of backward, the fraction of
    backward the link is busy in) of step_time, before the workers' updates."""
    costs = [layer_cost(layer, choice, cluster, machine, batch_size, settings.partition_bytes)
             for layer, choice in zip(layers, choices)]
    forward, backward = compute_times(layers, machine, batch_size, choices)
    apply = [apply_bytes(layer, choice) * machine.apply_per_byte
             for layer, choice in zip(layers, choices)]
    base = sum(backward)
    stretched = backward
    for _ in range(6 if machine.compute_loss and base else 1):
        done, ready, t_bwd_end, inside = _timeline(layers, costs, forward, stretched, cluster,
                                                   machine, settings)
        scale = 1 + machine.compute_loss * inside / base if base else 1
        stretched = [b * scale for b in backward]
    span = t_bwd_end - sum(forward)
    busy = min(1.0, inside / span) if span > 0 else 0.0
    return costs, forward, backward, apply, done, ready, t_bwd_end, busy


def cpu_inputs(layers, choices, cluster, machine, batch_size, settings=Settings()):
    """(costs, forward, backward, apply, busy) that step_time gives host_cpu."""
    costs, forward, backward, apply, _, _, _, busy = _step(
        layers, choices, cluster, machine, batch_size, settings)
    return costs, forward, backward, apply, busy


def host_cpu(costs, forward, backward, apply, cluster, machine, busy=0.0):
    """CPU-seconds per step on the busiest host: its workers' compute and optimizer
    updates, and every layer's codecs, sums, rebuilds and transport (LayerCost.host_*).
    transport_per_message counts per layer, fused or not: what a tensor costs is mostly
    the engine's and TensorFlow's work for it, which fusion keeps (tensor_probe.transport_costs
    times tiny tensors one after another, each its own round trip: see there). busy: the
    fraction of backward the link is busy in, where the compute's kernels take
    machine.compute_cpu_loss more."""
    L = min(cluster.workers_per_host, cluster.workers)
    compute = machine.compute_cpu * (sum(forward) + sum(backward)
                                     * (1 + machine.compute_cpu_loss * busy))
    sync = sum(c.host_cpu + c.host_bytes * machine.transport_per_byte
               + c.host_messages * machine.transport_per_message for c in costs)
    ops = sum(c.worker_ops for c in costs) * machine.tf_per_op
    return L * (compute + sum(apply) + ops) + sync


def apply_bytes(layer, choice):
    """Parameter bytes the worker's optimizer updates: none in PS mode; an embedding's
    gathered rows only (their scatter-add is in the gather's cost) when the optimizer
    updates rows (plain SGD), else the whole layer."""
    if choice.mode == PS_DENSE or (choice.mode == GATHER and layer.row_update):
        return 0
    return layer.bytes


def _timeline(layers, costs, forward, backward, cluster, machine, settings):
    """(done, ready, end of backward, link busy seconds before the end of backward) of
    one step whose backward takes `backward` per layer."""
    t_fwd = sum(forward)
    ready, t = [0.0] * len(layers), t_fwd
    for index in reversed(range(len(layers))):
        t += backward[index]
        ready[index] = t + costs[index].cpu_before
    t_bwd_end = t
    if _has_ready_times(layers):  # when the real step had each gradient ready (Layer.ready)
        ready = [t_fwd + layer.ready * (t_bwd_end - t_fwd) + c.cpu_before
                 for layer, c in zip(layers, costs)]
    bandwidth = cluster.bandwidth
    if settings.credit:  # a window of `credit` bytes in flight: one round trip per window
        bandwidth *= settings.credit / (settings.credit + cluster.bandwidth * cluster.latency)
    # Each message is cut into partitions, served one at a time: a partition's pushes,
    # then (servers beside the workers: LayerCost.reply_bytes) its replies, on the link
    # once the pushes are in. A reply goes before the pushes still waiting: it travels
    # on a connection of its own (server to worker), which TCP serves beside the pushes'
    # instead of behind them, so the layers come back one by one as on the real link;
    # the bytes through the link are the same in any order. The last partition's reply
    # completes its layers.
    pieces = []
    for order, msg in enumerate(_messages(layers, costs, ready, settings)):
        count = msg["messages"]
        for piece in range(count):
            pieces.append((msg["ready"], msg["priority"], order, piece,
                           (msg["bytes"] - msg["reply"]) / count / bandwidth
                           + machine.message_overhead,
                           msg["layers"] if piece == count - 1 else [],
                           msg["reply"] / count / bandwidth))
    pieces.sort(key=lambda p: (p[0], p[2], p[3]))
    done = [t_bwd_end if costs[i].messages == 0 else 0.0 for i in range(len(layers))]
    # The CPU work after a layer's bytes arrive (server sums, decoding, local sums,
    # rebuilds) queues on one more resource, in arrival order.
    clock, cpu_clock, waiting, next_piece, inside = 0.0, 0.0, [], 0, 0.0
    while next_piece < len(pieces) or waiting:
        if not waiting and pieces[next_piece][0] > clock:
            clock = pieces[next_piece][0]
        while next_piece < len(pieces) and pieces[next_piece][0] <= clock:
            p = pieces[next_piece]
            # FIFO by readiness, or by priority (the layer nearest the input) under
            # credit; replies (0) before pushes (1)
            heapq.heappush(waiting, (1, (p[1] if settings.credit else p[0]), p[2], p[3], p))
            next_piece += 1
        piece = heapq.heappop(waiting)[-1]
        inside += max(0.0, min(clock + piece[4], t_bwd_end) - clock)
        clock += piece[4]
        if piece[6] > 0:  # its replies, ready now
            reply = (clock, piece[1], piece[2], piece[3], piece[6], piece[5], 0.0)
            heapq.heappush(waiting, (0, (reply[1] if settings.credit else clock), reply[2],
                                     reply[3], reply))
            continue
        for index in piece[5]:
            c = costs[index]
            cpu_clock = max(cpu_clock, clock) + c.cpu_after
            done[index] = cpu_clock + cluster.latency + c.tail_bytes / bandwidth
    return done, ready, t_bwd_end, inside


def shared_step(layers, choices, cluster, machine, batch_size, settings=Settings()):
    """step_time's result with the host's cores and its link on one timeline
    (hoststep.simulate: the compute, the transport, the servers and the updates share
    machine.cores_per_host), and at least the host's CPU floor (host_cpu over the cores,
    then one round trip). The compute's speed lost beside the link (compute_loss) is not
    added: the shared cores are how it loses it."""
    costs, forward, backward, apply, _, _, _, busy = _step(layers, choices, cluster, machine,
                                                           batch_size, settings)
    fractions = ready_fractions(layers, backward)
    t_fwd, t_bwd = sum(forward), sum(backward)
    messages = _messages(layers, costs, [t_fwd + f * t_bwd for f in fractions], settings)
    step, done, ready = hoststep.simulate(layers, choices, costs, forward, backward, apply,
                                          messages, fractions, cluster, machine, settings)
    step = max(step, host_cpu(costs, forward, backward, apply, cluster, machine, busy)
               / machine.cores_per_host + cluster.latency)
    return step, [(c, d - r) for c, d, r in zip(costs, done, ready)]


def ready_fractions(layers, backward):
    """Per layer, the fraction of backward done when its gradient is ready: Layer.ready
    where every layer has it, else once the layer's own backward is done (backward: its
    seconds per layer, from the last layer to the first)."""
    if _has_ready_times(layers):
        return [layer.ready for layer in layers]
    total, fractions, t = sum(backward), [0.0] * len(layers), 0.0
    for index in reversed(range(len(layers))):
        t += backward[index]
        fractions[index] = t / total if total else 1.0
    return fractions

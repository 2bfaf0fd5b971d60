"""One training step on a host's cores and its link together.

steptime's timeline puts the link's work and the compute on one clock, and prices the
host's CPU apart, as a floor under the step (steptime.host_cpu over the host's cores).
Each bound holds alone, but where the two are close each resource waits for the other,
which neither bound sees. Here every CPU-second of that floor runs on the host's cores,
shared among the work that can run at each moment, and the link carries what that CPU
has handed it:

- the workers' compute: forward, then backward, each layer's gradient ready at its place
  in backward (Layer.ready where it was measured);
- per layer, the collective op's TensorFlow CPU (Machine.tf_per_op), beside the rest;
- per partition: the codec's encode; the push on the link, while the sender's and the
  receiver's I/O threads spend the transport's CPU for its bytes and messages (the link
  carries no byte faster than they hand it over); the servers' sums and updates; the
  reply on the link, the transport's CPU beside it again; the worker's decode;
- between peers (SFB's factors, an embedding's rows): every part of the exchange, one
  way (half a round trip: Cluster.latency is a push_pull's), then the rebuild or the
  rows' scatter-add, which needs every peer's part;
- the worker's optimizer update of each layer once the layer is back.

The cores are shared in proportion to the threads each runnable part keeps busy, as the
kernel's scheduler shares them, and no part gets more than its threads: the compute
Machine.compute_cpu per worker, the workers' updates one per worker, the transport two
(the sending and the receiving end), every other part one. The hosts are alike and in
step (each carries the busiest host's share of every transfer), so one host's timeline
is the step.
"""

import collections
import heapq

from tf_ps_ops.plan.cost import GATHER, SFB

_EPS = 1e-12


class _Part:
    """CPU work served first in first out, one item at a time, on up to `threads` cores:
    items [CPU-seconds left, callback(time done)]."""

    def __init__(self, threads):
        self.threads = threads
        self.queue = collections.deque()

    def add(self, work, then):
        self.queue.append([max(0.0, work), then])


def split_cpu(cost, choice, machine, workers_on_host):
    """A layer's synchronisation CPU on the host (steptime.host_cpu's terms for it), by
    where it runs: (encode, servers, receive, transport beside the push, transport beside
    the reply, the collective ops). Through servers the transport's CPU is half beside
    the pushes, half beside the replies; between peers all of it beside the exchange,
    and what the host's CPU adds beyond the encode is the receive's (the rebuild, the
    rows' scatter-add)."""
    transport = cost.host_bytes * machine.transport_per_byte \
        + cost.host_messages * machine.transport_per_message
    ops = workers_on_host * cost.worker_ops * machine.tf_per_op
    encode = min(cost.host_cpu, workers_on_host * cost.cpu_before)
    rest = cost.host_cpu - encode
    if choice.mode in (SFB, GATHER):
        return encode, 0.0, rest, transport, 0.0, ops
    return encode, rest, 0.0, transport / 2, transport / 2, ops


class _Step:
    """The event loop of `simulate`."""

    def __init__(self, layers, choices, costs, forward, backward, apply, messages, ready_at,
                 cluster, machine, settings):
        self.L = min(cluster.workers_per_host, cluster.workers)
        self.cluster, self.machine, self.settings = cluster, machine, settings
        self.bandwidth = cluster.bandwidth
        if settings.credit:  # as steptime's timeline: one round trip per window
            self.bandwidth *= settings.credit / (settings.credit
                                                 + cluster.bandwidth * cluster.latency)
        self.apply = apply
        self.parts = dict(encode=_Part(1), server=_Part(1), receive=_Part(1),
                          wire=_Part(2), ops=_Part(1), apply=_Part(self.L))
        self.split = [split_cpu(c, ch, machine, self.L) for c, ch in zip(costs, choices)]
        self.t_fwd, self.t_bwd = sum(forward), sum(backward)
        self.marks = sorted((self.t_fwd + f * self.t_bwd, i) for i, f in enumerate(ready_at))
        self.progress, self.mark, self.end_compute = 0.0, 0, None
        self.clock, self.last, self.link, self.count = 0.0, 0.0, None, 0
        self.timers, self.waiting = [], []  # (time, n, callback); the link's queue
        self.ready, self.done = [0.0] * len(layers), [None] * len(layers)
        # Each message's partitions share its layers' CPU evenly.
        self.group = {}
        for order, msg in enumerate(messages):
            count = msg["messages"]
            cpu = [sum(self.split[i][k] for i in msg["layers"]) / count for k in range(5)]
            peers = all(choices[i].mode in (SFB, GATHER) for i in msg["layers"])
            if peers or msg["reply"] <= 0:  # no reply crosses: all the transport beside
                cpu[3], cpu[4] = cpu[3] + cpu[4], 0.0
            state = dict(order=order, msg=msg, count=count, cpu=cpu, left=count,
                         unready=len(msg["layers"]), peers=peers,
                         tail=max(costs[i].tail_bytes for i in msg["layers"]) / self.bandwidth)
            for i in msg["layers"]:
                self.group[i] = state

    def _next(self):
        self.count += 1
        return self.count

    def later(self, when, callback):
        heapq.heappush(self.timers, (when, self._next(), callback))

    def finished(self, state, when):
        for index in state["msg"]["layers"]:
            self.layer_done(index, when)

    def layer_done(self, index, when):
        self.done[index] = when
        self.parts["apply"].add(self.L * self.apply[index], self._spent)

    def _spent(self, when):
        """An update or an op's CPU done: the step ends no sooner."""
        self.last = max(self.last, when)

    def to_link(self, state, reply, when):
        key = state["msg"]["priority"] if self.settings.credit else when
        heapq.heappush(self.waiting, (0 if reply else 1, key, state["order"], self._next(),
                                      reply, state))

    def layer_ready(self, index):
        self.ready[index] = self.clock
        self.parts["ops"].add(self.split[index][5], self._spent)
        state = self.group.get(index)
        if state is None:  # nothing to send (one worker, no weights)
            self.layer_done(index, self.clock)
            return
        state["unready"] -= 1
        if not state["unready"]:  # fused: once all of its layers are
            for _ in range(state["count"]):
                self.parts["encode"].add(state["cpu"][0],
                                         lambda t, s=state: self.to_link(s, False, t))

    def start_link(self):
        *_, reply, state = heapq.heappop(self.waiting)
        msg, count = state["msg"], state["count"]
        if reply:
            seconds = msg["reply"] / count / self.bandwidth
        elif state["peers"]:
            seconds = msg["bytes"] / count / self.bandwidth + self.machine.message_overhead
        else:
            seconds = (msg["bytes"] - msg["reply"]) / count / self.bandwidth \
                + self.machine.message_overhead
        link = dict(end=self.clock + seconds, wire=True, reply=reply, state=state)
        self.parts["wire"].add(state["cpu"][4 if reply else 3],
                               lambda t: link.__setitem__("wire", False))
        self.link = link

    def crossed(self, state, reply):
        """A partition's push or reply is through the link."""
        cpu, latency = state["cpu"], self.cluster.latency
        if state["peers"]:
            state["left"] -= 1
            if not state["left"]:  # every part in, one way later: the rebuild
                self.later(self.clock + latency / 2 + state["tail"], lambda t: self.parts[
                    "receive"].add(state["count"] * cpu[2], lambda t2: self.finished(state, t2)))
        elif reply or state["msg"]["reply"] <= 0:
            then = (lambda t: self.parts["receive"].add(cpu[2], lambda t2: self.back(state, t2)))
            if reply:
                then(self.clock)
            else:  # dedicated servers: their sum, then the pull
                self.parts["server"].add(cpu[1], then)
        else:
            self.parts["server"].add(cpu[1], lambda t: self.to_link(state, True, t))

    def back(self, state, when):
        state["left"] -= 1
        if not state["left"]:  # the round trip's latency, and the tail's bytes
            self.later(when + self.cluster.latency + state["tail"],
                       lambda t: self.finished(state, t))

    def run(self):
        compute_threads = self.machine.compute_cpu * self.L
        end = self.t_fwd + self.t_bwd
        while True:
            while self.timers and self.timers[0][0] <= self.clock + _EPS:
                heapq.heappop(self.timers)[2](self.clock)
            if self.link is None and self.waiting:
                self.start_link()
            computing = self.end_compute is None
            busy = [p for p in self.parts.values() if p.queue]
            if not computing and not busy and self.link is None and not self.timers:
                return
            threads = sum(p.threads for p in busy) + (compute_threads if computing else 0)
            share = min(1.0, self.machine.cores_per_host / threads) if threads else 1.0
            # The next event: the compute's next mark, a part's item, the link, a timer.
            step = float("inf")
            if computing:
                backward = self.progress >= self.t_fwd - _EPS
                # backward's kernels take compute_cpu_loss more CPU while the link is busy
                slow = 1 + (self.machine.compute_cpu_loss if backward and self.link else 0)
                speed = share / slow  # seconds of the lone step's compute per second
                target = end if backward else self.t_fwd
                if self.mark < len(self.marks):
                    target = min(target, self.marks[self.mark][0])
                step = max(0.0, target - self.progress) / speed
            for p in busy:
                step = min(step, p.queue[0][0] / (p.threads * share))
            if self.link is not None and self.link["end"] > self.clock:
                step = min(step, self.link["end"] - self.clock)
            if self.timers:
                step = min(step, max(0.0, self.timers[0][0] - self.clock))
            self.clock += step
            for p in busy:
                p.queue[0][0] -= p.threads * share * step
            if computing:
                self.progress += speed * step
                while self.mark < len(self.marks) and \
                        self.marks[self.mark][0] <= self.progress + _EPS:
                    self.layer_ready(self.marks[self.mark][1])
                    self.mark += 1
                if self.progress >= end - _EPS and self.mark >= len(self.marks):
                    self.end_compute = self.clock
            for p in busy:
                if p.queue and p.queue[0][0] <= _EPS:
                    p.queue.popleft()[1](self.clock)
            link = self.link
            if link is not None and link["end"] <= self.clock + _EPS and not link["wire"]:
                self.link = None
                self.crossed(link["state"], link["reply"])


def simulate(layers, choices, costs, forward, backward, apply, messages, ready_at, cluster,
             machine, settings):
    """(step seconds, per layer when its parameters are back, per layer when its gradient
    was ready) of one step on Machine.cores_per_host cores and the cluster's link.
    costs: each layer's LayerCost; forward, backward: its compute seconds alone (on
    Machine.compute_cpu cores per worker); apply: its update's CPU-seconds per worker;
    messages: steptime._messages' groups (fused layers, partitions, the link's order
    among equals); ready_at: per layer, the fraction of backward done when its gradient
    is ready."""
    step = _Step(layers, choices, costs, forward, backward, apply, messages, ready_at,
                 cluster, machine, settings)
    step.run()  # every layer is ready once backward ends, and done after
    return max([step.end_compute or 0.0, step.last] + step.done), step.done, step.ready

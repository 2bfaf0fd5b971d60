"""The step on a host's cores and its link together (tf_ps_ops/plan/hoststep.py) against
hand-computed cases, the link-only timeline it extends and the CPU floor under it. No
TensorFlow."""

import dataclasses
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tf_ps_ops.plan import cost, hoststep, layers, steptime  # noqa: E402
from tf_ps_ops.plan.cost import Choice, Cluster  # noqa: E402

MB = 1 << 20
MS = 1e-3
# Compute at 1 GMAC/s and no CPU price anywhere else, unless a test sets one.
QUIET = dataclasses.replace(cost.FREE, macs_per_s=1e9)


def simulate(lay, choices, cluster, machine, settings=steptime.Settings(MB, 0, 0)):
    """(step, done, ready) of hoststep.simulate, with steptime's inputs."""
    costs = [cost.layer_cost(layer, c, cluster, machine, 1, settings.partition_bytes)
             for layer, c in zip(lay, choices)]
    forward, backward = steptime.compute_times(lay, machine, 1, choices)
    apply = [steptime.apply_bytes(layer, c) * machine.apply_per_byte
             for layer, c in zip(lay, choices)]
    ready_at = steptime.ready_fractions(lay, backward)
    ready = [sum(forward) + f * sum(backward) for f in ready_at]
    messages = steptime._messages(lay, costs, ready, settings)
    return hoststep.simulate(lay, choices, costs, forward, backward, apply, messages,
                             ready_at, cluster, machine, settings)


def test_compute_shares_the_core_with_the_transport_hand_computed():
    # One core per host, two hosts. Forward 2 ms (a, b 1 ms each), then b's backward 2 ms
    # and a's 1 ms (the first layer computes no input gradient). Each layer's transport
    # costs 2 ms of CPU (4 collectives of 0.5 ms: the worker's push and pull, its server's
    # receive and reply), half while its push crosses the (instant) link, half while the
    # reply does, on the two I/O threads. b is ready at 4 ms; its push's transport (two
    # threads) and a's backward (one) share the core 2:1, so the push's 1 ms takes 1.5 ms
    # (to 5.5) while a's backward gets 0.5 ms done; the reply's the same (to 7.0), which
    # ends a's backward: a is ready at 7 ms, and back 2 ms later, alone on the core.
    a = layers.Layer("a", "other", 1024, None, 1, 1e6)
    b = layers.Layer("b", "other", 1024, None, 1, 1e6)
    machine = dataclasses.replace(QUIET, cores_per_host=1.0, transport_per_message=0.5 * MS)
    cluster = Cluster(2, bandwidth=1e15, latency=0.0)
    step, done, ready = simulate([a, b], [Choice()] * 2, cluster, machine)
    assert ready == pytest.approx([7 * MS, 4 * MS], abs=1e-9)
    assert done == pytest.approx([9 * MS, 7 * MS], abs=1e-6)
    assert step == pytest.approx(9 * MS, abs=1e-6)
    # Every CPU-second of the floor, on a core never idle here: the step is the floor.
    *parts, busy = steptime.cpu_inputs([a, b], [Choice()] * 2, cluster, machine, 1,
                                       steptime.Settings(MB, 0, 0))
    floor = steptime.host_cpu(*parts, cluster, machine, busy)
    assert floor == pytest.approx(9 * MS)


def test_the_servers_sum_between_push_and_reply_hand_computed():
    # Two hosts, one core each, one layer of 1 MiB (W) summed. Compute 2 ms. Its push (W/2
    # per direction through the host: the other host's server's half) takes 4 ms on the
    # link, and the reply 4 ms. The transport's 2 ms of CPU ride them (1 ms each, on two
    # threads: the core's), and the host's server adds the two workers' halves of its
    # share, 2 ms of CPU, after the push and before the reply: 2 + 4 + 2 + 4 = 12 ms. The
    # link's timeline alone and the CPU floor (6 ms) each miss that the two wait for each
    # other: the timeline counts the sum after the reply, on the server's two threads.
    a = layers.Layer("a", "other", MB // 4, None, 1, 1e6)
    w = MB
    machine = dataclasses.replace(
        QUIET, cores_per_host=1.0, transport_per_byte=2 * MS / (4 * w),
        codec_per_byte=(("none", (0.0, 0.0, 2 * MS / w)),))
    cluster = Cluster(2, bandwidth=(w / 2) / (4 * MS), latency=0.0)
    settings = steptime.Settings(MB, 0, 0)
    step, per_layer = steptime.step_time([a], [Choice()], cluster, machine, 1, settings)
    assert step == pytest.approx(12 * MS, rel=1e-9)
    assert per_layer[0][1] == pytest.approx(10 * MS, rel=1e-9)  # from ready at 2 ms
    timeline, _ = steptime.step_time([a], [Choice()], cluster,
                                     dataclasses.replace(machine, cores_per_host=0.0), 1,
                                     settings)
    assert timeline == pytest.approx(11 * MS, rel=1e-9)  # 2 + 4 + 4 + 2 ms / 2 threads


def test_a_peer_exchange_rebuilds_once_every_part_is_in():
    # SFB over 3 hosts: each worker's factors go to 2 peers, 1 ms each on the link; the
    # rebuild (3 ms of CPU) needs all of them, one way (half the 2 ms round trip) after
    # the last: 1 + 1 + 1 + 3 = 6 ms. No compute (the layer has no multiply-adds).
    n = m = 256
    fc = layers.Layer("fc", "dense", n * m, (n, m), 1, 0.0)
    factors = 4 * 1 * (n + m)  # a batch of one row
    rebuild_rate = n * m * 3 * 1 / (3 * MS)
    machine = dataclasses.replace(QUIET, cores_per_host=1.0, rebuild_rate=rebuild_rate)
    cluster = Cluster(3, bandwidth=2 * factors / (2 * MS), latency=2 * MS)
    step, _ = steptime.step_time([fc], [Choice(cost.SFB)], cluster, machine, 1)
    assert step == pytest.approx(6 * MS, rel=1e-9)


def test_with_cores_to_spare_and_free_cpu_it_is_the_links_timeline():
    # Nothing priced on the CPU but the compute, cores for every thread and no latency:
    # the link carries the same pieces in the same order as steptime's timeline, in every
    # mode, fused or not, under credit or not.
    lay = [layers.dense("d0", 256, 512), layers.dense("d1", 512, 512),
           layers.Layer("c", "conv", 3 * MB // 4, None, 1, 2e6),
           layers.dense("d2", 512, 10)]
    cluster = Cluster(3, bandwidth=1e8, latency=0.0)
    spare = dataclasses.replace(QUIET, cores_per_host=1e6, message_overhead=20e-6)
    for choices in ([Choice()] * 4, [Choice(cost.PS_DENSE)] * 4,
                    [Choice(cost.SFB), Choice(), Choice(cost.PS_DENSE), Choice(cost.SFB)]):
        for settings in (steptime.Settings(MB, 0, 0), steptime.Settings(256 * 1024, 1 << 18, 0),
                         steptime.Settings(MB, 1 << 18, 1 << 20)):
            shared, _ = steptime.step_time(lay, choices, cluster, spare, 4, settings)
            alone, _ = steptime.step_time(lay, choices, cluster,
                                          dataclasses.replace(spare, cores_per_host=0.0), 4,
                                          settings)
            assert shared == pytest.approx(alone, rel=1e-9), (choices, settings)


@pytest.mark.parametrize("cores", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("model", ["resnet50", "zoo-bert", "zoo-dlrm"])
def test_never_shorter_than_the_floor_or_the_links_timeline(model, cores):
    # With the costs this machine measures (order of magnitude), every mode the model
    # takes, 3 hosts: the step on the shared cores is at least the CPU floor and the
    # link's timeline (no latency, which the exchange between peers halves).
    lay = layers.builtin(model)
    machine = cost.Machine(macs_per_s=2e10, cores_per_host=cores, transport_per_byte=1e-9,
                           transport_per_message=80e-6, tf_per_op=50e-6, apply_per_byte=0.2e-9,
                           compute_cpu=1.0)
    cluster = Cluster(3, bandwidth=1.25e8, latency=0.0)
    batch = 8
    for mode in (cost.SUM, cost.PS_DENSE, cost.SFB):
        choices = [Choice(cost.GATHER) if layer.sparse else
                   Choice(mode) if mode != cost.SFB or layer.kernel else Choice()
                   for layer in lay]
        step, _ = steptime.step_time(lay, choices, cluster, machine, batch)
        timeline, _ = steptime.step_time(lay, choices, cluster,
                                         dataclasses.replace(machine, cores_per_host=0.0),
                                         batch)
        *parts, busy = steptime.cpu_inputs(lay, choices, cluster, machine, batch)
        floor = steptime.host_cpu(*parts, cluster, machine, busy) / cores
        assert step >= max(timeline, floor) * (1 - 1e-9), mode

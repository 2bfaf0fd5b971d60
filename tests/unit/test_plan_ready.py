"""When the gradients are ready (cost model Layer.ready; tf_ps_ops/plan/ready.py): the
cost model against hand-computed steps whose gradients come out of layer order, and the
ready times read from an engine timeline. No TensorFlow."""

import dataclasses
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tf_ps_ops.plan import cost, layers, ready, steptime  # noqa: E402
from tf_ps_ops.plan.cost import Choice, Cluster  # noqa: E402

MB = 1 << 20
MACHINE = cost.Machine(macs_per_s=1e9, sum_per_byte=0.0, message_overhead=0.0,
                       codec_per_byte=(("none", (0, 0, 0)),))


def two_layers():
    # Forward 1 ms each; backward 2 ms for b, 1 ms for a (no gradient for the input).
    return [layers.Layer("a", "other", MB, None, 1, 1e6),
            layers.Layer("b", "other", MB, None, 1, 1e6)]


# Servers on machines of their own: a partition's pull comes back on the workers' other
# direction right after its push (beside the workers, replies queue behind the pushes:
# test_plan_cost.test_replies_of_servers_beside_the_workers_queue_on_the_link).
def step(model, machine=MACHINE, cluster=Cluster(2, dedicated_servers=2, bandwidth=1e9,
                                                 latency=0.0)):
    return steptime.step_time(model, [Choice()] * len(model), cluster, machine, 1,
                              steptime.Settings(MB, 0, 0))


def test_gradients_ready_at_the_end_of_backward_hide_nothing():
    # Layer order: b ready at 4 ms, a at 5 ms; each 4 MB per direction (4.19 ms) and the
    # last partition's pull (1.05 ms). Both ready at the end of backward (5 ms): b is
    # sent from 5 ms, a after it, and the step is 1 ms longer.
    per_dir = 4 * MB / 1e9
    in_order, _ = step(two_layers())
    assert in_order == pytest.approx(0.004 + 2 * per_dir + MB / 1e9)
    late = [dataclasses.replace(layer, ready=1.0) for layer in two_layers()]
    t, per_layer = step(late)
    assert t == pytest.approx(0.005 + 2 * per_dir + MB / 1e9)
    assert t - in_order == pytest.approx(0.001)
    assert per_layer[1][1] == pytest.approx(per_dir + MB / 1e9)  # b: sent first


def test_an_early_gradient_goes_first_whatever_its_layer():
    # a (the first layer) ready a third into backward (3 ms), before b (5 ms): a's
    # transfer first, 3..7.19 ms; b waits for the link and goes after it.
    per_dir = 4 * MB / 1e9
    model = two_layers()
    model = [dataclasses.replace(model[0], ready=1 / 3),
             dataclasses.replace(model[1], ready=1.0)]
    _, per_layer = step(model)
    assert per_layer[0][1] == pytest.approx(per_dir + MB / 1e9)
    assert per_layer[1][1] == pytest.approx(0.003 + 2 * per_dir - 0.005 + MB / 1e9)


def test_layer_order_ready_times_reproduce_the_default():
    model = layers.vgg16()
    machine = dataclasses.replace(MACHINE, macs_per_s=5e12, compute_loss=0.3)
    cluster = Cluster(4, bandwidth=1.25e9, latency=50e-6)
    _, backward = steptime.compute_times(model, machine, 32)
    fractions = [sum(backward[i:]) / sum(backward) for i in range(len(model))]
    timed = [dataclasses.replace(layer, ready=f) for layer, f in zip(model, fractions)]
    settings = steptime.Settings()
    default = steptime.step_time(model, [Choice()] * len(model), cluster, machine, 32, settings)
    same = steptime.step_time(timed, [Choice()] * len(model), cluster, machine, 32, settings)
    assert same[0] == pytest.approx(default[0], rel=1e-9)


def test_ready_times_in_the_layer_list_json():
    model = [dataclasses.replace(layer, ready=0.5) for layer in two_layers()]
    assert layers.from_json(layers.to_json(model)) == model
    assert layers.from_json(layers.to_json(two_layers())) == two_layers()
    with pytest.raises(ValueError, match="layer 0 .*'c'.*ready 1.5 must be a fraction"):
        layers.from_json('[{"name": "c", "params": 4, "ready": 1.5}]')


def test_apply_fills_a_layer_without_a_time_from_the_next():
    model = layers.vgg16()[:3]
    got = ready.apply(model, [None, 0.9, None])
    assert [layer.ready for layer in got] == [0.9, 0.9, 1.0]
    assert ready.apply(model, [0.5]) == model  # does not match: unchanged
    assert ready.apply(model, None) == model


def trace(folder, steps):
    """An engine timeline: `steps` = [{tensor: queued ts in µs}], plus a broadcast once;
    kernels of 64 bytes, the rest 4."""
    events = [{"ph": "X", "name": "queued", "ts": 5, "dur": 1,
               "args": {"tensor": "broadcast.w", "bytes": 4}}]
    for handovers in steps:
        for tensor, ts in handovers.items():
            size = 64 if tensor.endswith("kernel") else 4
            events.append({"ph": "X", "name": "queued", "ts": ts, "dur": 10,
                           "args": {"tensor": tensor, "bytes": size}})
            events.append({"ph": "X", "name": "push", "ts": ts + 10, "dur": 10,
                           "args": {"tensor": tensor, "bytes": 4}})
    folder.mkdir()
    path = folder / "timeline.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path)


def test_from_timeline_places_the_handovers_between_the_first_and_the_end(tmp_path):
    # Three equal layers: backward 2 each but 1 for the first; c (the last) is handed
    # over first, 2/5 into backward; b last, at its end; a half-way between. The first
    # recorded step is dropped (warm-up).
    model = [layers.Layer(name, "other", 4, None, 1, 1.0) for name in "abc"]
    names = {"S.c/kernel": "c", "S.a/kernel": "a", "S.b/kernel": "b"}
    # c's bias (4 bytes beside its kernel's 64) is handed over last: c is ready with its
    # kernel.
    names["S.c/bias"] = "c"
    path = trace(tmp_path / "three", steps=[
        {"S.c/kernel": 100, "S.b/kernel": 110, "S.a/kernel": 120, "S.c/bias": 130},
        {"S.c/kernel": 1000, "S.a/kernel": 1500, "S.b/kernel": 2000, "S.c/bias": 2000},
        {"S.c/kernel": 3000, "S.a/kernel": 3500, "S.b/kernel": 4000, "S.c/bias": 4000}])
    got = ready.from_timeline(path, model, lambda t: names.get(t))
    start = 2 / 5
    assert got == pytest.approx([start + (1 - start) / 2, 1.0, start])
    # One step only (dropped as warm-up), or no tensor of the model: nothing to tell.
    one = trace(tmp_path / "one", [{"S.c/kernel": 1, "S.a/kernel": 2}])
    assert ready.from_timeline(one, model, lambda t: names.get(t)) is None
    assert ready.from_timeline(path, model, lambda t: None) is None

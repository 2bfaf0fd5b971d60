"""plan="auto" and mode="auto": the errors a wrong call gets before any cluster is
involved (the cluster behaviour is tests/multiprocess/test_plan_auto.py's)."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

keras = pytest.importorskip("keras")

import sfb  # noqa: E402
import tf_ps_ops as hvd  # noqa: E402
from tf_ps_ops.plan import auto  # noqa: E402


def _model():
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(4, name="fc"),
                             keras.layers.Dense(1, name="out")])


def test_convert_auto_needs_batch_size_and_a_cluster():
    with pytest.raises(ValueError, match="auto mode needs batch_size"):
        sfb.convert(_model(), mode="auto")
    with pytest.raises(ValueError, match="call tf_ps_ops.init"):
        sfb.convert(_model(), mode="auto", batch_size=8)


def test_optimizer_plan_arguments_checked():
    sgd = keras.optimizers.SGD(0.1)
    with pytest.raises(ValueError, match='use "auto" or None'):
        hvd.DistributedOptimizer(sgd, plan="fast")
    with pytest.raises(ValueError, match="plan_pins without plan"):
        hvd.DistributedOptimizer(sgd, plan_pins={"fc/kernel": "sum"})
    with pytest.raises(ValueError, match="picks the codecs itself"):
        hvd.DistributedOptimizer(sgd, plan="auto", compression=hvd.Compression.int8)


def test_environment_variables(monkeypatch):
    monkeypatch.setenv("TFPS_PLAN", "sometimes")
    with pytest.raises(ValueError, match="TFPS_PLAN='sometimes'"):
        auto.plan_mode_from_environment()
    monkeypatch.setenv("TFPS_PLAN", "auto")
    assert auto.plan_mode_from_environment() == "auto"
    monkeypatch.setenv("TFPS_PLAN_CODECS", "none,int4")
    with pytest.raises(ValueError, match="codec 'int4'"):
        auto.allowed_codecs()
    monkeypatch.setenv("TFPS_PLAN_CODECS", "none, fp16")
    assert auto.allowed_codecs() == ("none", "fp16")


def test_pins_by_key():
    keys = ["DistributedSGD.fc/kernel", "DistributedSGD.fc/bias"]
    assert auto._pins_by_key(keys, {"fc/kernel": "sum+int8", "credit": 0}) == {
        "DistributedSGD.fc/kernel": "sum+int8", "credit": 0}
    with pytest.raises(ValueError, match="names no reduced gradient"):
        auto._pins_by_key(keys, {"conv/kernel": "sum"})


def test_the_plan_made_while_a_step_is_traced_is_not_converted_by_autograph(monkeypatch):
    # DistributedOptimizer(plan="auto") plans at its first reduction, inside the traced
    # step: autograph converted the planner's plain Python, and ResNet-50's 161 gradients
    # with a codec to weigh took minutes instead of a tenth of a second.
    import inspect

    import tensorflow as tf

    from tf_ps_ops.plan import cost, measure
    from tf_ps_ops.training.keras_optimizer import ReducingMixin

    ran_in = []
    real = auto.compressions

    def recording(*args, **kwargs):
        ran_in.append(inspect.currentframe().f_code.co_filename)
        return real(*args, **kwargs)

    monkeypatch.setattr(auto, "compressions", recording)
    reducer = ReducingMixin()
    reducer._tfps_plan = measure.Measurements(cost.Cluster(2), cost.Machine(), False)
    grads = [tf.ones((4, 4)), tf.ones((4,))]

    @tf.function
    def step():
        planned = reducer._tfps_compression_for(grads, ["w", "b"], [])
        return tf.constant(len(planned))

    assert int(step()) == 2
    assert ran_in == [__file__], ran_in  # this file's function, not autograph's copy of it


def test_plan_gives_the_servers_the_update_where_it_costs_the_workers_more(monkeypatch):
    """PS mode moves the optimizer's update from every worker to the servers (each
    updates its share): the plan picks it where that update is dear, never with a codec,
    and not where the servers cannot run the optimizer (the reason given) or
    TFPS_PLAN_MODES leaves it out."""
    from tf_ps_ops.plan import cost, measure

    monkeypatch.setenv("TFPS_PLAN_CODECS", "none,int8")
    keys, sizes = ["D.fc/kernel", "D.fc/bias"], [1 << 22, 64]
    cluster = cost.Cluster(4, 1, 1, bandwidth=1.25e9, latency=50e-6)
    cheap = measure.Measurements(cluster, cost.Machine(apply_per_byte=0.0), False)
    dear = measure.Measurements(cluster, cost.Machine(apply_per_byte=5e-9), False)
    _, plan = auto.compressions(keys, sizes, cheap, ps=None)
    assert auto.served(plan) == frozenset()  # a tie keeps summation
    _, plan = auto.compressions(keys, sizes, dear, ps=None)
    assert "D.fc/kernel" in auto.served(plan), plan.choices
    assert all(c.codec == "none" for c in plan.choices if c.mode == cost.PS_DENSE)
    why = "clipnorm would act on the local copy only"
    _, plan = auto.compressions(keys, sizes, dear, ps=why)
    assert auto.served(plan) == frozenset(), plan.choices
    with pytest.raises(ValueError, match="'ps' is not possible here: clipnorm"):
        auto.compressions(keys, sizes, dear, pins={"fc/kernel": "ps"}, ps=why)
    monkeypatch.setenv("TFPS_PLAN_MODES", "ps")
    with pytest.raises(ValueError, match="sum must stay allowed"):
        auto.allowed_modes()
    monkeypatch.setenv("TFPS_PLAN_MODES", "sum,sfb")
    with pytest.raises(ValueError, match="mode 'sfb'"):
        auto.allowed_modes()


def test_one_machine_under_hierarchical_aggregation_keeps_the_default(monkeypatch):
    """Every worker on one machine, hierarchical aggregation on: the cost model counts each
    worker as a host of its own and cannot see the local sum, so the plan keeps the
    default configuration (no PS mode, SFB or codec unless pinned); off, it plans."""
    import dataclasses

    from tf_ps_ops.plan import cost, layers, measure

    assert measure.one_machine_hierarchical(3, 3, True)
    assert not measure.one_machine_hierarchical(3, 3, False)  # TFPS_HIERARCHICAL=0
    assert not measure.one_machine_hierarchical(3, 1, True)  # one worker per host
    assert not measure.one_machine_hierarchical(4, 2, True)  # two hosts
    assert not measure.one_machine_hierarchical(1, 1, True)
    monkeypatch.setenv("TFPS_PLAN_CODECS", "none,int8")
    keys, sizes = ["D.fc/kernel", "D.fc/bias"], [1 << 22, 64]
    cluster = cost.Cluster(4, 1, 1, bandwidth=1.25e8, latency=50e-6)
    free = measure.Measurements(cluster, cost.Machine(apply_per_byte=5e-9), False)
    one = dataclasses.replace(free, one_machine_hierarchical=True)
    _, plan = auto.compressions(keys, sizes, free, ps=None)
    assert plan.choices != (cost.Choice(),) * 2, plan.choices  # PS mode or int8
    _, plan = auto.compressions(keys, sizes, one, ps=None)
    assert plan.choices == (cost.Choice(),) * 2, plan.choices
    _, plan = auto.compressions(keys, sizes, one, ps=None, pins={"fc/kernel": "ps"})
    assert auto.served(plan) == frozenset({"D.fc/kernel"}), plan.choices
    # SFB (sfb.convert's plan): a Dense layer that a fast rebuild would give to SFB.
    fc = [layers.dense("fc", 4096, 4096, bias=False)]
    fast = dataclasses.replace(free, machine=cost.Machine(rebuild_rate=1e13))
    assert auto._plans(fc, fast, 32, ("none",), {})[0].choices == (cost.Choice("sfb"),)
    fast_one = dataclasses.replace(fast, one_machine_hierarchical=True)
    assert auto._plans(fc, fast_one, 32, ("none",), {})[0].choices == (cost.Choice(),)


def test_why_the_servers_cannot_run_an_optimizer(monkeypatch):
    from tf_ps_ops import keras as tfps_keras

    class Custom(keras.optimizers.SGD):
        pass

    def why(optimizer, **kwargs):
        distributed = hvd.DistributedOptimizer(optimizer, **kwargs)
        return tfps_keras._why_not_ps(distributed, optimizer)

    monkeypatch.delenv("TFPS_PLAN_MODES", raising=False)  # the default allows ps
    assert why(keras.optimizers.Adam(0.1)) is None
    assert why(keras.optimizers.RMSprop(0.1), backward_passes_per_step=2) == \
        "backward_passes_per_step > 1"
    assert "Adadelta" in why(keras.optimizers.Adadelta(0.1))
    assert "Custom" in why(Custom(0.1))
    assert why(keras.optimizers.SGD(0.1, weight_decay=1e-4)).startswith("weight_decay")
    assert "op=Average" in why(keras.optimizers.SGD(0.1), op=hvd.Sum)
    monkeypatch.setenv("TFPS_PLAN_MODES", "sum")
    assert why(keras.optimizers.SGD(0.1)) == "TFPS_PLAN_MODES leaves ps out"


def test_the_update_probes_time_cpu_not_the_wall_clock():
    """Every worker probes its update at once; where workers share cores, the wall time
    of one counts the others' turns. A step that waits without computing costs no CPU."""
    import time

    import tensorflow as tf

    from tf_ps_ops.plan import tensor_probe

    def wait():
        time.sleep(0.05)
        return 0

    @tf.function
    def waits():
        return tf.py_function(wait, [], tf.int32)

    start = time.perf_counter()
    cpu = tensor_probe.median_cpu_seconds(waits, 3)
    assert time.perf_counter() - start >= 4 * 0.05  # the traced call and three timed
    assert 0.0 <= cpu < 0.02

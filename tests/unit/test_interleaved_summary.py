"""The interleaved benchmark's arithmetic (benchmarks/interleaved.py): a block's step is the
slowest worker's, the CPU per host is the worker's plus its ps_server's, the plan is paired
with each other arm round by round (the same t-interval as the zoo's), and an arm whose
weights drift from summation's is flagged. Checked against NumPy on hand-made results."""

import json
import math
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import interleaved  # noqa: E402
import interleaved_worker  # noqa: E402


def result(rank, steps, cpu, server, weights):
    """One worker's INTERLEAVED_RESULT: {arm: [step of each round]} etc."""
    arms = list(steps)
    blocks = {arm: [dict(round=i, step_s=s, cpu_s=cpu[arm][i], server_cpu_s=server[arm][i],
                         loss=1.0) for i, s in enumerate(steps[arm])] for arm in arms}
    return dict(rank=rank, workers=2, model="m", batch=4, arms=arms, block=5, rounds=4,
                warmup=1, blocks=blocks, weight_abs_sum=weights,
                layout={arm: dict(variables=3, ps=0, sfb=0) for arm in arms})


def test_the_plan_is_paired_with_each_arm_round_by_round_on_the_slowest_worker():
    sum0 = [0.20, 0.30, 0.22, 0.25]
    auto0 = [0.19, 0.28, 0.21, 0.26]
    sum1 = [0.21, 0.29, 0.23, 0.24]  # rank 1 slower in rounds 0 and 2
    auto1 = [0.20, 0.27, 0.22, 0.25]
    cpu = {"sum": [0.1] * 4, "auto": [0.2, 0.2, 0.3, 0.3]}
    server = {"sum": [0.05] * 4, "auto": [0.0] * 4}
    weights = {"sum": 10.0, "auto": 10.0 * (1 + 1e-6)}
    cell = interleaved.summarize(
        [result(1, {"sum": sum1, "auto": auto1}, cpu, server, weights),
         result(0, {"sum": sum0, "auto": auto0}, cpu, server, weights)], "1gbit", "m")
    slowest_sum, slowest_auto = np.maximum(sum0, sum1), np.maximum(auto0, auto1)
    assert cell["arms"]["sum"]["round_step_s"] == pytest.approx(slowest_sum)
    assert cell["arms"]["auto"]["step_s"] == pytest.approx(np.median(slowest_auto))
    logs = np.log(slowest_auto / slowest_sum)
    half = 2.353 * logs.std(ddof=1) / math.sqrt(4)  # t(0.95, 3 degrees of freedom)
    mean, low, high, n = cell["plan_vs"]["sum"]
    assert n == 4 and mean == pytest.approx(math.exp(logs.mean()))
    assert (low, high) == pytest.approx((math.exp(logs.mean() - half),
                                         math.exp(logs.mean() + half)))
    assert cell["verdict"].startswith("not settled") or cell["verdict"].startswith("yes")
    # CPU per host: the hosts' mean of worker + server, median over the rounds.
    assert cell["arms"]["sum"]["cpu_host_s"] == pytest.approx(0.15)
    assert cell["arms"]["auto"]["cpu_worker_s"] == pytest.approx(0.25)
    assert cell["arms"]["auto"]["same_weights_as_sum"] is True
    assert "| 1gbit | m | auto |" in interleaved.table([cell])


def test_an_arm_that_trained_differently_is_flagged():
    steps = {"sum": [0.2, 0.2], "ps": [0.2, 0.21]}
    zero = {"sum": [0.0, 0.0], "ps": [0.0, 0.0]}
    cell = interleaved.summarize([result(0, steps, zero, zero, {"sum": 10.0, "ps": 10.1})],
                                 "10gbit", "m")
    assert cell["arms"]["ps"]["same_weights_as_sum"] is False
    assert cell["arms"]["ps"]["weights_vs_sum"] == pytest.approx(0.01)
    assert "1.0e-02 apart" in interleaved.table([cell])
    assert "verdict" not in cell  # no plan among the arms: nothing to pair


def test_the_arms_order_rotates_a_place_per_round():
    arms = ["sum", "ps", "auto"]
    orders = [interleaved_worker.rotated(arms, r) for r in range(4)]
    assert orders == [["sum", "ps", "auto"], ["ps", "auto", "sum"], ["auto", "sum", "ps"],
                      ["sum", "ps", "auto"]]
    assert {tuple(o)[0] for o in orders[:3]} == set(arms)  # each arm leads once


def test_the_summary_gives_a_line_per_saved_cell(tmp_path):
    steps = {"sum": [0.20, 0.22, 0.21], "auto": [0.19, 0.21, 0.20]}
    cpu = {arm: [0.1] * 3 for arm in steps}
    cell = interleaved.summarize([result(0, steps, cpu, cpu, {"sum": 1.0, "auto": 1.0})],
                                 "10gbit", "m")
    cell["arms"]["auto"]["predicted_error"] = -0.12
    path = tmp_path / "interleaved_x.json"
    path.write_text(json.dumps(dict(meta=dict(tag="x"), cells=[cell])))
    lines = interleaved.summary([path]).splitlines()
    assert len(lines) == 3 and lines[2].startswith("| x | 10gbit | 1 | m | 3 variables |")
    mean = math.exp(np.mean(np.log(np.array(steps["auto"]) / np.array(steps["sum"]))))
    assert "sum %.2f [" % mean in lines[2] and "auto -12%" in lines[2]


def test_repredict_predicts_a_saved_run_again_from_its_measured_inputs(tmp_path):
    # A real --predict run's JSON (the DLRM at 2 hosts, 1 Gbit/s), with its predictions
    # spoiled: --repredict puts back what the cost model gives its saved inputs and the
    # lone step, and says so in the table.
    from train_report import predict_step

    saved = json.loads(open(os.path.join(ROOT, "benchmarks", "results",
                                         "interleaved_2h_1gbit_dlrm.json")).read())
    saved["meta"]["tag"] = "spoiled"
    for a in saved["cells"][0]["arms"].values():
        a["predicted_s"], a["predicted_error"] = 1.0, 99.0
    path = tmp_path / "interleaved_spoiled.json"
    path.write_text(json.dumps(saved))
    assert interleaved.main_args(["--repredict", str(path)]) == 0
    again = json.loads(path.read_text())
    cell = again["cells"][0]
    inputs = cell["workers_results"][0]["plan_inputs"]
    assert set(inputs) == set(cell["arms"]) and len(inputs) == 5
    for arm, a in cell["arms"].items():
        expected = predict_step(inputs[arm], cell["single"]["step_s"], cell["batch"],
                                cell["single"]["cpu_s"])
        assert a["predicted_s"] == pytest.approx(expected, rel=1e-12)
        assert a["predicted_error"] == pytest.approx(expected / a["step_s"] - 1, rel=1e-12)
        assert 0.5 < a["predicted_s"] / a["step_s"] < 2
    assert "Predicted again with the cost model of" in (tmp_path / "interleaved_spoiled.md") \
        .read_text()


def test_an_arm_is_a_mode_with_an_optional_cycle_time():
    assert interleaved_worker.valid_arm("sum") and interleaved_worker.valid_arm("sum:c300")
    assert interleaved_worker.arm_mode("hybrid:c0") == "hybrid"
    assert interleaved_worker.arm_cycle("sum:c300", 0) == 300
    assert interleaved_worker.arm_cycle("sum", 250) == 250  # the job's TFPS_CYCLE_US
    for bad in ("bogus", "sum:300", "sum:c", "sum:c-1", "sum:cx", "bogus:c300"):
        assert not interleaved_worker.valid_arm(bad), bad

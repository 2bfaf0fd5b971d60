"""Smoke test of the interleaved benchmark (benchmarks/interleaved.py --smoke): summation,
PS mode and the automatic plan of the toy BERT-shaped encoder trained side by side in one
job on two emulated hosts, in alternating blocks. Checks that every arm ran every round,
that PS mode's arm put every variable on the servers, and the oracle that makes the
method sound: the arms share nothing, so each, starting from one seed on the same data,
ends with summation's weights. With --predict, rank 0's lone step is timed every round
and each arm's step predicted. Timings are recorded, never asserted.

Needs root and `ip netns` (skipped otherwise, with the reason) and the native build.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from netns_support import AVAILABLE, WHY_NOT, require_build  # noqa: E402

pytestmark = [pytest.mark.skipif(not AVAILABLE, reason=WHY_NOT), pytest.mark.timeout(600)]


def test_three_arms_train_side_by_side_and_end_with_the_same_weights(tmp_path):
    require_build("_tf_ps_ops*.so")
    command = [sys.executable, str(REPO / "benchmarks" / "interleaved.py"), "--smoke",
               "--predict", "--results-dir", str(tmp_path), "--idle-patience", "0",
               "--arms", "sum,ps,auto,sum:c300"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=540,
                              cwd=tmp_path)
    except subprocess.TimeoutExpired as e:
        pytest.fail("interleaved.py --smoke took over 540 s:\n%s" % (e.stdout or "")[-4000:])
    assert done.returncode == 0, "interleaved.py --smoke failed:\n%s\n%s" % (
        done.stdout[-6000:], done.stderr[-6000:])

    report = json.loads((tmp_path / "interleaved_smoke.json").read_text())
    assert report["meta"]["failed"] == []
    (cell,) = report["cells"]
    assert cell["model"] == "smoke_bert" and cell["workers"] == 2
    assert list(cell["arms"]) == ["sum", "ps", "auto", "sum:c300"]
    for arm, a in cell["arms"].items():
        assert len(a["round_step_s"]) == 2 and all(s > 0 for s in a["round_step_s"]), arm
        assert a["same_weights_as_sum"] is True, (arm, a)
        assert a["cpu_worker_s"] > 0, (arm, a)
    layout = {arm: a["layout"] for arm, a in cell["arms"].items()}
    assert layout["ps"]["ps"] == layout["ps"]["variables"] > 0, layout
    assert layout["sum"]["ps"] == layout["sum"]["sfb"] == 0, layout
    assert layout["sum:c300"] == layout["sum"], layout  # summation, with a cycle time
    assert set(cell["plan_vs"]) == {"sum", "ps", "sum:c300"} and cell["verdict"]
    # Each block's CPU per thread of the worker, the main thread's and ZeroMQ's among them
    # (a toy block may take less than /proc's 10 ms tick: no thread need show CPU).
    for blocks in cell["workers_results"][0]["blocks"].values():
        for block in blocks:
            threads = block["threads"]
            assert {"main", "ZMQbg/IO/0"} <= set(threads), block
            assert all(cpu >= 0 for cpu in threads.values()), block
    # --predict: rank 0's lone step timed every round, and every arm predicted from it.
    assert len(cell["single"]["round_step_s"]) == 2 and cell["single"]["step_s"] > 0
    for arm, a in cell["arms"].items():
        assert a["predicted_s"] > 0, (arm, a)
        assert a["predicted_error"] == a["predicted_s"] / a["step_s"] - 1
    assert "smoke_bert" in (tmp_path / "interleaved_smoke.md").read_text()

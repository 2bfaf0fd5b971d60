"""Smoke test of the model-zoo benchmark (benchmarks/zoo.py --smoke): the BERT-shaped
encoder and the DLRM-like recommender, each at toy sizes with the same code, through the
training harness, 2 workers on two emulated hosts, tf_ps_ops' sum mode, 1 warm-up + 2 timed
steps. Checks that the models train through the harness, that the results are written with
sane numbers and that no namespace is left behind, so the zoo cannot rot. Throughput is
measured by the real run, never asserted.

The two keras.applications models (ResNet-50, MobileNetV2) go through the same harness code
but cost ~2 minutes of graph tracing in every process on a 2-core machine, too much for
`make test`; `python3 benchmarks/zoo.py --smoke --results-dir /tmp/zoo` runs all four.

Needs root and `ip netns` (skipped otherwise, with the reason) and the native build.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import netns  # noqa: E402
import zoo_models  # noqa: E402
from netns_support import AVAILABLE, WHY_NOT, namespaces, require_build  # noqa: E402

MODELS = ("bert", "dlrm")
pytestmark = [pytest.mark.skipif(not AVAILABLE, reason=WHY_NOT), pytest.mark.timeout(900)]


def test_every_zoo_model_runs_two_steps_through_the_harness(tmp_path):
    require_build("_tf_ps_ops*.so")
    command = [sys.executable, str(REPO / "benchmarks" / "zoo.py"), "--smoke",
               "--results-dir", str(tmp_path), "--models", ",".join(MODELS)]
    before = set(namespaces())  # another run's leftovers are not this one's to answer for
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=tmp_path)
    try:
        out, err = process.communicate(timeout=840)
    except subprocess.TimeoutExpired:
        process.terminate()  # the harness cleans its namespaces up on SIGTERM
        out, err = process.communicate(timeout=30)
        pytest.fail("zoo.py --smoke took over 840 s:\n%s\n%s" % (out[-4000:], err[-4000:]))
    assert process.returncode == 0, "zoo.py --smoke failed:\n%s\n%s" % (out[-6000:],
                                                                        err[-6000:])

    report = json.loads((tmp_path / "train_zoo_smoke.json").read_text())
    rows = {row["model"]: row for row in report["rows"]}
    assert set(rows) == {"smoke_" + name for name in MODELS}, sorted(rows)
    assert set(MODELS) <= set(zoo_models.ZOO)
    for row in rows.values():
        # "contaminated" only says that other processes used the CPU during the window.
        assert row["status"] in ("ok", "contaminated"), "%s: %s" % (
            row["model"], row.get("error", row))
        assert row["mode"] == "sum" and row["workers"] == 2, row
        assert row["steps"] == 2 and 0 < row["step_s"] < 60, row
        assert row["batch"] == 2 and row["samples_s"] > 0, row
        assert math.isfinite(row["loss_first"]) and math.isfinite(row["loss_last"]), row
        # The gradients crossed the emulated link (each host pushes to the other's server).
        assert row["tx_mb_per_step"] > 0.01, row
    md = (tmp_path / "train_zoo_smoke.md").read_text()
    assert "tf_ps_ops sum" in md and "smoke_dlrm" in md
    # Only this run's namespaces: other runs may be going on. zoo.py's child train_bench
    # names them after its own pid, so look for any left that no process owns.
    left = [n for n in set(namespaces()) - before if n.startswith(netns.PREFIX + "-")
            and not Path("/proc/%s" % n.split("-")[1]).exists()]
    assert not left, "namespaces left behind: %s" % sorted(left)

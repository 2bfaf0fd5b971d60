"""tests/gpu/tf_gpu_worker.py (the TensorFlow half of run_gpu_checks.sh) run on the CPU:
its oracles and its cluster plumbing keep working where no GPU is, so that the script
works the first time a GPU machine runs it. The placement checks are skipped here
(GPU_CHECKS_DEVICE=/CPU:0); the numbers are checked as on the GPU."""

import json
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).resolve().parents[1] / "gpu" / "tf_gpu_worker.py"
pytestmark = pytest.mark.timeout(400)

CHECKS = {"push_pull on GPU", "allgather on GPU", "broadcast on GPU", "push_pull op=Max on GPU",
          "SFB rebuild on GPU, bit-identical to NumPy", "PS apply (SGD) of a GPU variable",
          "2-worker Keras fit on GPU equals single-process fit"}


def test_the_gpu_worker_passes_on_the_cpu(make_cluster, tmp_path):
    cluster = make_cluster(2, 1, timeout=300,
                           env={"GPU_CHECKS_DEVICE": "/CPU:0", "GPU_CHECKS_OVERLAP_DIM": "32",
                                "TFPS_GPU_OUT": str(tmp_path)})
    cluster.start([sys.executable, str(WORKER)])
    cluster.wait()
    cluster.assert_ok()
    for rank in range(2):
        results = json.loads((tmp_path / f"rank{rank}.json").read_text())
        checks = {name: r for name, r in results.items() if "ok" in r}
        assert set(checks) == CHECKS, results
        assert all(r["ok"] for r in checks.values()), results
        assert results["overlap"]["compute_ms"] > 0

"""Bagua's algorithms (tf_ps_ops.algorithms, docs/algorithms.md) with exact arithmetic:
the neighbour exchange op, one averaging step of ring / shift_one D-PSGD and of the
low-precision ring against NumPy, and the async averaging thread's pause/resume/stop."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "workers"))
import harness  # noqa: E402

WORKER = Path(__file__).resolve().parent / "algorithm_workers" / "exact_worker.py"

pytestmark = pytest.mark.timeout(400)


def test_decentralized_algorithms_match_numpy(make_cluster):
    cluster = make_cluster(4, 1, timeout=300, env={"TFPS_TIMEOUT": "60"})
    harness.run_and_check(cluster, WORKER)

"""Bagua's algorithms (tf_ps_ops.algorithms, docs/algorithms.md) with exact arithmetic:
the neighbour exchange op, one averaging step of ring / shift_one D-PSGD and of the
low-precision ring against NumPy, the async averaging thread's pause/resume/stop; and a
neighbour killed with SIGKILL fails the exchange quickly, naming it."""

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "workers"))
import harness  # noqa: E402

WORKER = Path(__file__).resolve().parent / "algorithm_workers" / "exact_worker.py"

pytestmark = pytest.mark.timeout(400)


def test_decentralized_algorithms_match_numpy(make_cluster):
    cluster = make_cluster(4, 1, timeout=300, env={"TFPS_TIMEOUT": "60"})
    harness.run_and_check(cluster, WORKER)
    log = cluster.result("worker", 2).stderr
    assert "worker 0 sent call 1 of a tensor after this worker had finished that call" in log


def test_sigkill_neighbour_fails_the_exchange_quickly_and_names_it(make_cluster):
    cluster = make_cluster(3, 1, timeout=120, env={"TFPS_TIMEOUT": "60"})
    cluster.start([sys.executable, Path(__file__).resolve().parent / "algorithm_workers"
                   / "exchange_loop_worker.py", "1000000"])
    for rank in range(3):
        cluster.wait_for_output("worker", rank, "step 3 ok", timeout=90)
    killed_at = time.monotonic()
    cluster.kill("worker", 2)
    for rank in (0, 1):
        result = cluster.wait_for("worker", rank, timeout=30)
        assert result.returncode == 3, result.describe()
        assert "worker 2" in result.stderr, result.describe()
        assert "neighbour exchange of tensor 'loop'" in result.stderr, result.describe()
    assert time.monotonic() - killed_at < 30  # far below TFPS_TIMEOUT=60

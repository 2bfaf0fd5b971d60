"""Issue 12 (workers/coll4_worker.py, 4 workers, 1 server): reducescatter sends each worker
only its rows, Adasum by recursive halving with a gradient, against NumPy.

TFPS_TIMEOUT is far above the run's own limit: a rank that waited it out to learn of an
error fails the test instead of passing slowly. TFPS_SHM_SERVER=0: replies from the colocated
server through shared memory would not show in the byte counters the test reads."""

import sys
from pathlib import Path

import pytest

WORKERS = Path(__file__).resolve().parent / "workers"
sys.path.insert(0, str(WORKERS))
import harness  # noqa: E402

pytestmark = pytest.mark.timeout(400)


def test_coll4(make_cluster):
    cluster = make_cluster(4, 1, timeout=120, env={"TFPS_TIMEOUT": "900",
                                                            "TFPS_SHM_SERVER": "0"})
    harness.run_and_check(cluster, WORKERS / "coll4_worker.py")

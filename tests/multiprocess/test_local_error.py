"""Issue 12: a rank-local Python error before a collective's op (workers/local_error_worker.py,
3 workers, 2 servers) reaches every other rank at once as FailedPreconditionError naming the
failing worker and its reason, eagerly and in tf.function; the next collective works.

TFPS_TIMEOUT is far above the run's own limit: a rank that waited it out to learn of the
error fails the test instead of passing slowly."""

import sys
from pathlib import Path

import pytest

WORKERS = Path(__file__).resolve().parent / "workers"
sys.path.insert(0, str(WORKERS))
import harness  # noqa: E402

pytestmark = pytest.mark.timeout(400)


def test_local_error_reaches_every_rank(make_cluster):
    cluster = make_cluster(3, 2, timeout=300, env={"TFPS_TIMEOUT": "900"})
    harness.run_and_check(cluster, WORKERS / "local_error_worker.py")

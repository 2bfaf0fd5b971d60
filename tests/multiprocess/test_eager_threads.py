"""Unnamed eager collectives from several threads at once (issue 11, defect 4): before,
they shared one key per kind, so a thread's tensor met another thread's on the other
workers (6 of 10 results wrong, no error). Checked against the exact sums by the workers
(workers/threads_worker.py)."""

import sys
from pathlib import Path

import pytest

WORKERS = Path(__file__).resolve().parent / "workers"
sys.path.insert(0, str(WORKERS))
import harness  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def test_concurrent_unnamed_eager_calls_do_not_mix(make_cluster):
    cluster = make_cluster(2, 1, timeout=200, env={"TFPS_TIMEOUT": "60"})
    harness.run_and_check(cluster, WORKERS / "threads_worker.py")

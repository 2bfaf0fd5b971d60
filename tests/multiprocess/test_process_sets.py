"""Issue 12: Horovod process sets, join() and barrier() (workers/process_sets_worker.py, 4
workers, 2 servers): allreduce (every op), grouped_allreduce, allgather, broadcast,
alltoall, reducescatter and the tape/optimizer wrappers per set against NumPy; a worker
outside a set gets ValueError, a push claiming a foreign set is refused by the server;
sets added and removed on the fly, workers that disagree; join() with uneven data (Horovod's
semantics: joined workers add zeros, Average divides by size(), join returns the last rank
to join); barrier()."""

import sys
from pathlib import Path

import pytest

WORKERS = Path(__file__).resolve().parent / "workers"
sys.path.insert(0, str(WORKERS))
import harness  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def test_process_sets_join_and_barrier(make_cluster):
    cluster = make_cluster(4, 2, timeout=240, env={"TFPS_TIMEOUT": "120"})
    harness.run_and_check(cluster, WORKERS / "process_sets_worker.py")

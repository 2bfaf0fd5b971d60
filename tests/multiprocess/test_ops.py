"""Collective operations across real worker processes, each checked against a NumPy oracle
by the workers themselves (workers/ops_worker.py, workers/mismatch_worker.py)."""

import sys
from pathlib import Path

import pytest

WORKERS = Path(__file__).resolve().parent / "workers"
sys.path.insert(0, str(WORKERS))
import harness  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("num_workers,num_servers", [(2, 1), (4, 2)])
def test_collectives_match_numpy(make_cluster, num_workers, num_servers):
    # Small partitions so that the "large" tensors span more than 3 of them.
    cluster = make_cluster(num_workers, num_servers, timeout=180,
                           env={"TFPS_PARTITION_BYTES": "4096"})
    harness.run_and_check(cluster, WORKERS / "ops_worker.py")


def test_mismatches_are_invalid_argument_on_every_worker(make_cluster):
    # Workers find the cluster through BytePS's DMLC_* variables here.
    cluster = make_cluster(2, 1, timeout=120, env_style="byteps")
    harness.run_and_check(cluster, WORKERS / "mismatch_worker.py")

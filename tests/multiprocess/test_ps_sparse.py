"""Sparse PS updates: PsSparseApply ops match TF's ResourceSparseApply ops on the mean
gradient, and only touched rows travel (bytes per step independent of the table size)."""

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "workers"))
import harness  # noqa: E402

WORKER = Path(__file__).resolve().parent / "ps_workers" / "ps_sparse_worker.py"
pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("num_workers, num_servers, partition_bytes", [(1, 1, "4096"),
                                                                        (3, 2, "1024")])
def test_sparse_updates(make_cluster, num_workers, num_servers, partition_bytes):
    # 1000 x 16 float32 rows: 16 partitions of 1024 bytes over both servers with 3 workers.
    cluster = make_cluster(num_workers, num_servers, timeout=240,
                           env={"TFPS_PARTITION_BYTES": partition_bytes})
    harness.run_and_check(cluster, WORKER)
    for result in cluster.worker_results():
        sent = {int(m.group(1)): float(m.group(2))
                for m in re.finditer(r"BYTES rows=(\d+) per_step=(\d+)", result.stdout)}
        assert set(sent) == {1000, 100000}, result.stdout
        print(f"worker {result.index}: payload bytes per step {sent}")
        # The same batches touch the same number of rows whatever the table size; the
        # dense table is 64 000 / 6 400 000 bytes.
        assert abs(sent[1000] - sent[100000]) <= 0.2 * sent[1000], sent
        assert sent[100000] < 1000, sent

"""Peer-to-peer allgather of the engine (what SFB and Horovod's allgather use)."""

import re
import sys
from pathlib import Path

WORKER = Path(__file__).parent / "core_workers" / "gather_worker.py"


def test_allgather_matches_numpy_and_rejects_mismatches(make_cluster):
    cluster = make_cluster(3, 1, timeout=90, env={"TFPS_TIMEOUT": "20"})
    cluster.start([sys.executable, WORKER])
    cluster.wait()
    cluster.assert_ok()
    for rank in range(3):
        out = cluster.result("worker", rank).stdout
        assert re.search(r"worker \d sent int32\[2,\d\], worker %d has int32\[2,%d\]"
                         % (rank, 3 + rank), out), out
        # Each worker sends its own parts to the 2 others, nothing more: no server relay.
        own = sum((rank + c) * 5 * 4 for c in range(3)) + 32 * 4096 * 8 + 2 * (3 + rank) * 4
        assert f"peer bytes sent {2 * own}" in out, out
    for result in cluster.results():
        assert "ERROR" not in result.stderr, result.describe()

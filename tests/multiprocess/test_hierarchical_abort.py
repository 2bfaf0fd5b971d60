"""A collective that raised in Python on one rank only (PsAbortCollective; here through the
core's abort_collective, no TensorFlow), under hierarchical aggregation (TFPS_HIERARCHICAL=1,
issue 12): the aborting worker hands its local leader an "aborted" marker, the leader fails
the local step on every local worker with FailedPrecondition and fails the servers' rounds
too; and (flat or not) an abort reaches every partition's server, not only partition 0's.

TFPS_TIMEOUT is far above the first run's own limit: a rank that waited it out fails."""

import sys
from pathlib import Path

WORKER = Path(__file__).resolve().parent / "core_workers" / "abort_worker.py"
COUNT = 3000  # 12 KB of float32: 3 partitions of 4 KB over the 2 servers


def test_an_abort_on_a_hierarchical_key_fails_every_local_worker_at_once(make_cluster):
    # A member (local rank 1) aborts, then the leader (local rank 0).
    cluster = make_cluster(3, 2, timeout=60,
                           env={"TFPS_HIERARCHICAL": "1", "TFPS_TIMEOUT": "600",
                                "TFPS_PARTITION_BYTES": "4096"})
    cluster.start([sys.executable, WORKER, str(COUNT), "1,0"])
    cluster.wait()
    cluster.assert_ok()
    for rank in range(3):
        out = cluster.result("worker", rank).stdout
        assert "all ok" in out, out
    assert "hierarchical aggregation" in cluster.result("worker", 2).stdout


def test_an_abort_reaches_every_partitions_server(make_cluster):
    # Flat: rank 0 pushes the three partitions of 'x' while rank 1 aborts. Every server
    # with a partition gets the abort and fails that round at once: none is left open for
    # its server to warn of a stall or end (TFPS_STALL_WARNING=1, TFPS_STALL_SHUTDOWN=2
    # here, and the job outlives them).
    cluster = make_cluster(2, 2, timeout=60,
                           env={"TFPS_HIERARCHICAL": "0", "TFPS_STALL_SHUTDOWN": "2",
                                "TFPS_STALL_WARNING": "1",
                                "TFPS_PARTITION_BYTES": "4096"})
    cluster.start([sys.executable, WORKER, str(COUNT), "1", "3"])
    cluster.wait()
    cluster.assert_ok()
    for rank in range(2):
        assert "all ok" in cluster.result("worker", rank).stdout
    for server in range(2):
        log = cluster.result("server", server).stderr
        assert "stall" not in log, log

"""Hierarchical aggregation (TFPS_HIERARCHICAL=1) after the local workers went out of step:
a local step that only one worker called (and that timed out) is withdrawn, so the next
calls of the name pair up again, as they do on the flat path (issue 12)."""

import sys
from pathlib import Path

WORKER = Path(__file__).parent / "core_workers" / "out_of_step_worker.py"


def test_a_lone_call_that_timed_out_does_not_shift_the_local_steps(make_cluster):
    cluster = make_cluster(2, 1, timeout=60,
                           env={"TFPS_HIERARCHICAL": "1", "TFPS_STALL_SHUTDOWN": "2"})
    cluster.start([sys.executable, WORKER, "3"])
    cluster.wait()
    cluster.assert_ok()
    for rank in (0, 1):
        out = cluster.result("worker", rank).stdout
        assert "phase 0 ok" in out and "phase 1 ok" in out, out
        assert "lone call failed as expected" in out, out
    # The lone calls failed on the local wait, naming the hierarchical aggregation.
    assert "hierarchical" in cluster.result("worker", 0).stdout

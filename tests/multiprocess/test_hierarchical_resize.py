"""Hierarchical aggregation (TFPS_HIERARCHICAL=1) of a name whose size or dtype changes
between calls (issue 12): every eager allreduce of the Horovod shim goes under the one name
'push_pull.eager'. Each local worker re-creates its segment for the new shape and the others
re-map it; the sums stay exact and no segment is left behind. Calls of the name that are
not aggregated locally (int16) go flat in between: the local sums have server rounds of
their own, so the members' flat calls stay in step with the leader's."""

import sys
import uuid
from pathlib import Path

WORKER = Path(__file__).parent / "core_workers" / "resize_worker.py"


def test_a_name_that_changes_its_shape_every_call_sums_exactly(make_cluster):
    name = f"push_pull.eager {uuid.uuid4().hex}"  # its own key: other jobs' segments differ
    cluster = make_cluster(3, 1, timeout=90, env={"TFPS_HIERARCHICAL": "1", "TFPS_TIMEOUT": "20"})
    cluster.start([sys.executable, WORKER, name])
    cluster.wait()
    cluster.assert_ok()
    for rank in range(3):
        out = cluster.result("worker", rank).stdout
        assert "resize ok" in out, out
        # Every re-created segment was unlinked once mapped, as the first one is.
        assert "left 0" in out, out


def test_local_workers_that_disagree_on_a_size_all_fail_that_call_and_go_on(make_cluster):
    # Local rank 1 sends one element more at call 2 (after the name changed its shape):
    # every local worker fails that call alike, and none is left a step behind.
    name = f"push_pull.eager {uuid.uuid4().hex}"
    cluster = make_cluster(3, 1, timeout=90, env={"TFPS_HIERARCHICAL": "1", "TFPS_TIMEOUT": "20"})
    cluster.start([sys.executable, WORKER, name, "3"])
    cluster.wait()
    cluster.assert_ok()
    for rank in range(3):
        out = cluster.result("worker", rank).stdout
        assert "call 3 disagreed" in out and "resize ok" in out and "left 0" in out, out
    assert "local rank 1 (rank 1)" in cluster.result("worker", 0).stdout


def test_local_workers_that_disagree_on_a_shape_of_the_same_size_fail_alike(make_cluster):
    # Horovod's allreduce_error: [17, 1311] against [17, 23, 57]. Here local rank 1 sends
    # call 6's 5000 elements as [50, 100].
    name = f"push_pull.eager {uuid.uuid4().hex}"
    cluster = make_cluster(3, 1, timeout=90, env={"TFPS_HIERARCHICAL": "1", "TFPS_TIMEOUT": "20"})
    cluster.start([sys.executable, WORKER, name, "6", "reshape"])
    cluster.wait()
    cluster.assert_ok()
    for rank in range(3):
        out = cluster.result("worker", rank).stdout
        assert "call 6 disagreed" in out and "resize ok" in out, out

"""join() under hierarchical aggregation (TFPS_HIERARCHICAL=1, issue 12): Horovod's uneven
data, 3 workers on one host (local ranks 0, 1, 2), against NumPy bit for bit
(core_workers/join_worker.py; no TensorFlow).

Epoch 1: a member (rank 1) joins first, then the other member, the leader last: the leader
counts joined members as zeros and lists only the others in its push. Epoch 2: the leader
joins first and keeps pushing its members' local sums (with zeros as its own input) until
they have joined; the servers count it as joined in the flat float16 rounds at once
(kFlagJoinLeads, then kFlagJoinRelease). After each epoch every worker calls the same
names again and the steps pair up (the members counted as zeros take up the leader's step
count). Epoch 3: the leader joins first again, and the members call a name it never
called: each fails at once with FailedPrecondition, and the job goes on in step. Epoch 4:
the same, but the members call a name the leader knows with another size: that step fails
on both at once. join()
returns the rank with the most steps, on every worker. TFPS_TIMEOUT is far above the
test's own limit: a wait that ran into it fails the test."""

import sys
from pathlib import Path

from shm_names import leftovers, shm_segments

WORKER = Path(__file__).parent / "core_workers" / "join_worker.py"


def test_join_with_uneven_data_under_hierarchical_aggregation(make_cluster):
    before = shm_segments()
    cluster = make_cluster(3, 2, timeout=60,
                           env={"TFPS_HIERARCHICAL": "1", "TFPS_TIMEOUT": "300",
                                "TFPS_PARTITION_BYTES": "65536"})
    cluster.start([sys.executable, WORKER, "4,2,3/1,4,3/1,3,2!/1,3,3?"])
    cluster.wait()
    cluster.assert_ok()
    for rank in range(3):
        out = cluster.result("worker", rank).stdout
        assert "epoch 3 ok" in out and "join ok" in out, out
        if rank > 0:
            assert "local rank 0 (rank 0), has joined" in out, out
    assert not leftovers(before)  # nothing left in /dev/shm


def test_a_leader_still_serving_when_the_join_completes_takes_no_first_call(make_cluster):
    # The leader (1 step) joins first and serves its members; rank 2 (3 steps) joins last,
    # which completes the join on the servers at once (every rank is in their join order),
    # and calls again at once. The leader takes the servers' answer 1.5 s late (a test hook
    # standing for a loaded machine), still serving: it must not take rank 2's first call
    # after the join as one more step to serve with zeros (the wrong sum CI once saw).
    cluster = make_cluster(3, 1, timeout=60,
                           env={"TFPS_HIERARCHICAL": "1", "TFPS_TIMEOUT": "300",
                                "TFPS_PARTITION_BYTES": "65536"})
    cluster.start([sys.executable, WORKER, "1,2,3/1,2,3", "--pause-join-end", "1.5"])
    cluster.wait()
    cluster.assert_ok()
    for rank in range(3):
        out = cluster.result("worker", rank).stdout
        assert "epoch 1 ok" in out and "join ok" in out, out


def test_join_through_the_horovod_api(make_cluster):
    # TensorFlow workers (workers/hier_join_worker.py): Average, Min, float16 and float64.
    sys.path.insert(0, str(Path(__file__).parent / "workers"))
    import harness

    cluster = make_cluster(3, 1, timeout=120,
                           env={"TFPS_HIERARCHICAL": "1", "TFPS_TIMEOUT": "300"})
    harness.run_and_check(cluster, Path(__file__).parent / "workers" / "hier_join_worker.py")

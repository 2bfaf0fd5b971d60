"""Fusion: small partitions ready together travel as one batch message (both ways) and the
sums stay exact; with TFPS_FUSION_BYTES=0 every partition is its own message; with a cycle
(TFPS_CYCLE_US) partitions started apart wait for each other."""

import json
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "core_workers" / "group_worker.py"
STEPS = 6


def worker_outputs(make_cluster, workers, servers, worker, env):
    """([each worker's stdout], [each worker's engine counters: its "stats {...}" line])
    of a job of `worker` for STEPS steps, which checked every sum against NumPy itself."""
    cluster = make_cluster(workers, servers, timeout=90, env=env)
    cluster.start([sys.executable, worker, str(STEPS)])
    cluster.wait()
    cluster.assert_ok()  # every sum was checked against NumPy by the workers
    outs = [cluster.result("worker", rank).stdout for rank in range(workers)]
    return outs, [json.loads(out.split("stats ", 1)[1].splitlines()[0]) for out in outs]


def run(make_cluster, env):
    outs, stats = worker_outputs(make_cluster, 3, 2, WORKER, env)
    for out in outs:
        assert f"step {STEPS - 1} ok" in out
    return stats


@pytest.mark.parametrize("credit", ["0", "65536"])
def test_fused_results_are_exact_and_use_fewer_messages(make_cluster, credit):
    stats = run(make_cluster, {"TFPS_FUSION_BYTES": "262144", "TFPS_SCHEDULING_CREDIT": credit})
    for s in stats:
        assert s["batches_sent"] > 0, s
        assert s["messages_sent"] < s["parts_sent"] / 2, s
        assert s["batches_received"] > 0, s


def test_no_fusion_sends_one_message_per_partition(make_cluster):
    stats = run(make_cluster, {"TFPS_FUSION_BYTES": "0"})
    for s in stats:
        assert s["batches_sent"] == 0 and s["batches_received"] == 0, s
        assert s["messages_sent"] == s["parts_sent"], s


CODEC_WORKER = Path(__file__).parent / "core_workers" / "codec_fusion_worker.py"


def run_compressed(make_cluster, env):
    """2 workers, 1 server, 8 fp16-compressed partitions of 16 KiB (8 KiB encoded) per step."""
    return worker_outputs(make_cluster, 2, 1, CODEC_WORKER,
                          dict(env, TFPS_COMPRESSION="fp16"))[1]


def test_compressed_partitions_fuse_as_their_encoded_size_allows(make_cluster):
    # 16 KiB of float32 would not fuse under a 16 KiB limit; 8 KiB encoded fuse two by two.
    for s in run_compressed(make_cluster, {"TFPS_FUSION_BYTES": "16384",
                                           "TFPS_SCHEDULING_CREDIT": "0"}):
        assert s["parts_sent"] == 8 * STEPS, s
        assert s["messages_sent"] == 4 * STEPS and s["batches_sent"] == 4 * STEPS, s


def test_the_credit_counts_encoded_bytes(make_cluster):
    # 20000 bytes of credit: one 16 KiB float32 partition at a time, two 8 KiB encoded ones
    # (which then leave as one batch).
    for s in run_compressed(make_cluster, {"TFPS_FUSION_BYTES": "65536",
                                           "TFPS_SCHEDULING_CREDIT": "20000"}):
        assert s["parts_sent"] == 8 * STEPS, s
        assert s["batches_sent"] == 4 * STEPS and s["messages_sent"] == 4 * STEPS, s


CYCLE_WORKER = Path(__file__).parent / "core_workers" / "cycle_worker.py"


def run_staggered(make_cluster, cycle_us):
    """2 workers, 2 servers; per step 8 small push_pulls started 5 ms apart."""
    return worker_outputs(make_cluster, 2, 2, CYCLE_WORKER,
                          {"TFPS_CYCLE_US": cycle_us, "TFPS_FUSION_BYTES": "262144"})[1]


def test_a_cycle_sends_partitions_started_apart_together(make_cluster):
    # The step's 8 tensors arrive over 35 ms; a 100 ms cycle holds each server's batch
    # until all of them are in: one message per server per step.
    for s in run_staggered(make_cluster, "100000"):
        assert s["parts_sent"] == 8 * STEPS, s
        assert s["messages_sent"] <= 2 * STEPS, s
        assert s["batches_sent"] >= STEPS, s


def test_without_a_cycle_partitions_started_apart_leave_apart(make_cluster):
    # Each tensor leaves in the engine's turn it arrives in, 5 ms after the one before.
    for s in run_staggered(make_cluster, "0"):
        assert s["parts_sent"] == 8 * STEPS, s
        assert s["messages_sent"] > 4 * STEPS, s

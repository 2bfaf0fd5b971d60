"""Fusion: small partitions ready together travel as one batch message (both ways) and the
sums stay exact; with TFPS_FUSION_BYTES=0 every partition is its own message."""

import json
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "core_workers" / "group_worker.py"
STEPS = 6


def run(make_cluster, env):
    cluster = make_cluster(3, 2, timeout=90, env=env)
    cluster.start([sys.executable, WORKER, str(STEPS)])
    cluster.wait()
    cluster.assert_ok()  # every sum was checked against NumPy by the workers
    stats = []
    for rank in range(3):
        out = cluster.result("worker", rank).stdout
        assert f"step {STEPS - 1} ok" in out
        stats.append(json.loads(out.split("stats ", 1)[1].splitlines()[0]))
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


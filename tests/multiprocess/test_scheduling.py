"""Scheduling credit and priorities leave results unchanged; the timeline is valid JSON
listing every tensor's stages."""

import json
import sys
from pathlib import Path

WORKER = Path(__file__).parent / "core_workers" / "loop_worker.py"
GROUP_WORKER = Path(__file__).parent / "core_workers" / "group_worker.py"


def test_a_small_credit_cannot_deadlock_workers_that_start_tensors_in_other_orders(
        make_cluster):
    # Each worker may keep only ~1 partition in flight, and odd ranks start the tensors in
    # reverse order: if credit came back only with the sum, worker 0 would wait for worker
    # 1's push of its first tensor while worker 1 waits for worker 0's push of another.
    # Credit comes back when the server acknowledges the push, so it cannot.
    cluster = make_cluster(2, 2, timeout=120, env={
        "TFPS_PARTITION_BYTES": "4096", "TFPS_SCHEDULING_CREDIT": "1024",
        "TFPS_TIMEOUT": "30"})
    cluster.start([sys.executable, GROUP_WORKER, "3", "--reverse-odd"])
    cluster.wait()
    cluster.assert_ok()  # every sum was checked against NumPy by the workers
    for rank in range(2):
        assert "step 2 ok" in cluster.result("worker", rank).stdout


def test_credit_keeps_results_exact_and_timeline_lists_every_tensor(make_cluster, tmp_path):
    # 12 KB tensors in 1 KB partitions over 2 servers, at most 2 KB in flight per worker:
    # the engine must hold partitions back and release them as answers come.
    timeline = tmp_path / "timeline-%r.json"
    cluster = make_cluster(3, 2, timeout=90, env={
        "TFPS_PARTITION_BYTES": "1024", "TFPS_SCHEDULING_CREDIT": "2048",
        "TFPS_TIMELINE": str(timeline)})
    cluster.start([sys.executable, WORKER, "30"])
    cluster.wait()
    cluster.assert_ok()  # every sum was checked against NumPy by the workers
    for rank in range(3):
        path = tmp_path / f"timeline-{rank}.json"
        trace = json.loads(path.read_text())
        events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        stages = {}
        for e in events:
            assert e["dur"] >= 0 and e["pid"] == rank
            stages.setdefault(e["args"]["tensor"], []).append(e["name"])
        assert set(stages) == {"loop"}, stages.keys()
        for stage in ("queued", "scheduled", "push", "server", "pull", "written"):
            assert stages["loop"].count(stage) == 30, (stage, stages["loop"].count(stage))
        names = [e for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]
        assert [n["args"]["name"] for n in names] == ["loop"]

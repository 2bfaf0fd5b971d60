"""The rendezvous drops a dead member (issue 11, defect 5), tested with SIGKILL.

Before the cluster is complete, a registered worker or server that dies frees its place
and a restarted one takes it (before: the restart was refused, "registered twice", and the
job could never start). After, a dead member is named to every other member at once by
the scheduler (test_failure_notice.py, test_faults.py), and a restarted member is refused
in seconds with the reason instead of waiting out TFPS_TIMEOUT.
"""

import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
LOOP_WORKER = HERE / "core_workers" / "loop_worker.py"
pytestmark = pytest.mark.timeout(240)
ENV = {"TFPS_TIMEOUT": "60"}


def wait_for_count(cluster, role, index, text, count, timeout=30):
    """Waits until process (role, index) has logged `text` `count` times."""
    limit = time.monotonic() + timeout
    while time.monotonic() < limit:
        result = cluster.result(role, index)
        if result.stderr.count(text) >= count:
            return
        assert result.returncode is None, result.describe()
        time.sleep(0.05)
    pytest.fail(f"{role} {index} did not log {text!r} {count} times:\n"
                + cluster.result(role, index).describe())


def wait_until(go):
    """A worker command that waits for the file `go` before it starts (and registers)."""
    return [sys.executable, "-c",
            "import os, sys, time\n"
            f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
            f"os.execv(sys.executable, [sys.executable, {str(LOOP_WORKER)!r}, '5'])"]


def test_a_worker_killed_before_the_cluster_is_complete_can_be_restarted(make_cluster,
                                                                         tmp_path):
    go = tmp_path / "go"
    cluster = make_cluster(2, 1, timeout=120, env=ENV)
    cluster.start(lambda rank: [sys.executable, LOOP_WORKER, "5"] if rank == 0 else wait_until(go))
    cluster.wait_for_output("scheduler", 0, "worker 0 registered")
    cluster.kill("worker", 0)
    cluster.wait_for_output("scheduler", 0, "worker 0 (127.0.0.1) disconnected")
    # The restart, under another label in the job: same rank, same environment.
    cluster._job.start_worker(10, [sys.executable, LOOP_WORKER, "5"], cluster.worker_env(0))
    wait_for_count(cluster, "scheduler", 0, "worker 0 registered", 2)
    go.touch()
    for rank in (10, 1):
        result = cluster.wait_for("worker", rank, timeout=60)
        assert result.returncode == 0 and "step 4 ok" in result.stdout, result.describe()
    assert "its rank is free again" in cluster.result("scheduler", 0).stderr
    for role in ("server", "scheduler"):
        result = cluster.wait_for(role, 0, timeout=30)
        assert result.returncode == 0, result.describe()


def test_a_server_killed_before_the_cluster_is_complete_can_be_restarted(make_cluster,
                                                                         tmp_path):
    go = tmp_path / "go"
    cluster = make_cluster(2, 2, timeout=120, env=dict(ENV, TFPS_PARTITION_BYTES="4096"))
    cluster.start(lambda rank: [sys.executable, LOOP_WORKER, "5"] if rank == 0 else wait_until(go))
    cluster.wait_for_output("scheduler", 0, "server 1 registered")
    cluster.kill("server", 0)
    time.sleep(2)  # the scheduler notices the closed connection at once
    cluster._job.start_server(10, cluster.base_env())
    wait_for_count(cluster, "scheduler", 0, "server 1 registered", 2)
    go.touch()
    for rank in range(2):
        result = cluster.wait_for("worker", rank, timeout=60)
        assert result.returncode == 0 and "step 4 ok" in result.stdout, result.describe()
    assert "its place is free again" in cluster.result("scheduler", 0).stderr
    for role, index in (("server", 1), ("server", 10), ("scheduler", 0)):
        result = cluster.wait_for(role, index, timeout=30)
        assert result.returncode == 0, result.describe()


def test_a_member_restarted_after_a_death_is_refused_in_seconds_with_the_reason(make_cluster):
    cluster = make_cluster(2, 1, timeout=120, env=ENV)
    # Worker 0 stops calling after 5 steps but stays: the scheduler serves on.
    cluster.start(lambda rank: [sys.executable, LOOP_WORKER, "100000"]
                  + (["--stall-at", "5"] if rank == 0 else []))
    cluster.wait_for_output("worker", 0, "stalling")
    cluster.kill("worker", 1)
    cluster.wait_for_output("scheduler", 0, "worker 1 (127.0.0.1) is gone")
    started = time.monotonic()
    cluster._job.start_worker(10, [sys.executable, LOOP_WORKER, "5"], cluster.worker_env(1))
    restarted = cluster.wait_for("worker", 10, timeout=20)
    assert time.monotonic() - started < 20
    assert restarted.returncode == 3, restarted.describe()
    assert "cannot join" in restarted.stderr, restarted.describe()
    assert "worker 1 (127.0.0.1) is gone" in restarted.stderr, restarted.describe()


def test_a_stopped_server_is_found_by_heartbeat_and_named_to_everyone(make_cluster):
    # SIGSTOP: the process is alive and its sockets open, but nothing answers. The
    # scheduler's heartbeat (TFPS_HEARTBEAT_TIMEOUT) finds it and tells every member,
    # also the other server, which has no connection to it.
    import re
    import signal
    cluster = make_cluster(2, 2, timeout=120,
                           env=dict(ENV, TFPS_HEARTBEAT_TIMEOUT="2", TFPS_PARTITION_BYTES="4096"))
    cluster.start([sys.executable, LOOP_WORKER, "100000"])
    for rank in range(2):
        cluster.wait_for_output("worker", rank, "step 3 ok")
    served = cluster.wait_for_output("server", 1, "serving on port").stderr
    stopped_id = re.search(r"\[tfps server (\d)\]", served).group(1)
    cluster.kill("server", 1, signal.SIGSTOP)
    try:
        started = time.monotonic()
        other = cluster.wait_for("server", 0, timeout=30)
        assert time.monotonic() - started < 30
        assert other.returncode == 1, other.describe()
        assert f"server {stopped_id} (127.0.0.1:" in other.stderr, other.describe()
        assert "is gone: it disconnected from the scheduler" in other.stderr, other.describe()
        for rank in range(2):
            result = cluster.wait_for("worker", rank, timeout=30)
            assert result.returncode == 3, result.describe()
            assert f"server {stopped_id} (127.0.0.1:" in result.stderr, result.describe()
    finally:
        cluster.kill("server", 1, signal.SIGKILL)

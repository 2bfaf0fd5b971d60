"""Faults: a peer killed with SIGKILL, a stuck worker, garbage on a server port.

The survivors must fail with an error that names the dead peer, well within TFPS_TIMEOUT
(a killed process closes its sockets, and that is noticed at once), and never hang.
Workers here use the C++ core without TensorFlow so they start in well under a second.
"""

import re
import socket
import signal
import sys
import time
from pathlib import Path

import pytest
import zmq

from native import load_core

WORKER = Path(__file__).parent / "core_workers" / "loop_worker.py"
core = load_core()


def test_sigkill_worker_fails_the_others_quickly_and_names_it(make_cluster):
    cluster = make_cluster(3, 2, timeout=60, env={"TFPS_TIMEOUT": "60"})
    cluster.start([sys.executable, WORKER, "100000"])
    for rank in range(3):
        cluster.wait_for_output("worker", rank, "step 3 ok")
    killed_at = time.monotonic()
    cluster.kill("worker", 2)
    for rank in (0, 1):
        result = cluster.wait_for("worker", rank, timeout=20)
        assert result.returncode == 3, result.describe()
        # From a server, or from the scheduler's notice, whichever comes first.
        assert re.search(r"worker 2( \(127\.0\.0\.1\))? is gone", result.stderr), \
            result.describe()
        assert "push_pull of tensor 'loop'" in result.stderr
    assert time.monotonic() - killed_at < 20  # far below TFPS_TIMEOUT=60
    for index in range(2):
        server = cluster.wait_for("server", index, timeout=20)
        assert server.returncode == 1, server.describe()
        assert "worker 2 is gone" in server.stderr


def test_sigkill_server_fails_the_workers_quickly_and_names_it(make_cluster):
    # Small partitions: the loop's tensor (12 KB) lives on both servers.
    cluster = make_cluster(2, 2, timeout=60,
                           env={"TFPS_TIMEOUT": "60", "TFPS_PARTITION_BYTES": "4096"})
    cluster.start([sys.executable, WORKER, "100000"])
    for rank in range(2):
        cluster.wait_for_output("worker", rank, "step 3 ok")
    port = server_port(cluster, 1)  # server ids follow registration order, not our index
    cluster.kill("server", 1)
    for rank in range(2):
        result = cluster.wait_for("worker", rank, timeout=20)
        assert result.returncode == 3, result.describe()
        assert re.search(rf"server \d \(127\.0\.0\.1:{port}\) closed the connection",
                         result.stderr), result.describe()


def test_stuck_worker_times_out_naming_it(make_cluster):
    # Alive but stuck: only TFPS_STALL_SHUTDOWN ends the wait (test_stall.py: the default
    # waits on).
    cluster = make_cluster(2, 1, timeout=60, env={"TFPS_STALL_SHUTDOWN": "3"})
    cluster.start(lambda rank: [sys.executable, WORKER, "1000"]
                  + (["--stall-at", "5"] if rank == 1 else []))
    result = cluster.wait_for("worker", 0, timeout=30)
    assert result.returncode == 3, result.describe()
    assert "but not by rank(s) 1, which are alive" in result.stderr, result.describe()
    assert "TFPS_STALL_SHUTDOWN" in result.stderr
    assert cluster.result("worker", 1).returncode is None  # the stuck one is still stuck


def server_port(cluster, index):
    result = cluster.wait_for_output("server", index, "serving on port")
    return int(re.search(r"serving on port (\d+)", result.stderr).group(1))


def test_garbage_on_a_server_port_is_dropped_and_serving_goes_on(make_cluster, tmp_path):
    go = tmp_path / "go"
    cluster = make_cluster(2, 1, timeout=60, env={"TFPS_TIMEOUT": "30"})
    cluster.start([sys.executable, WORKER, "20", "--wait-for", go])
    for rank in range(2):
        cluster.wait_for_output("worker", rank, "step 0 ok")
    port = server_port(cluster, 0)

    # Raw bytes that are not ZeroMQ at all.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        raw.sendall(b"GET / HTTP/1.1\r\n\r\n" + bytes(range(256)) * 64)
        time.sleep(0.2)
    context = zmq.Context()
    try:
        dealer = context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.RCVTIMEO, 5000)
        dealer.setsockopt(zmq.ROUTING_ID, b"intruder")
        dealer.connect(f"tcp://127.0.0.1:{port}")
        T = core.MSG_TYPES
        hello = dict(type=T["HELLO"], sender=0)
        bad_frames = [
            [b"\x00" * 10],                                           # truncated head
            [core.encode_head(dict(hello, version=9))],               # future version
            [core.encode_head(dict(type=T["PUSH_PULL"], sender=0, dtype=3, count=4,
                                   total_count=4, num_partitions=1), [4]), b"x" * 3],
            [core.encode_head(hello)],                                # identity is not w0
            [b"a", b"b", b"c", b"d"],                                 # too many frames
            # A batch, from a connection that is not worker 0's.
            [core.encode_head(dict(type=T["BATCH"], sender=0, count=1)),
             core.encode_head(dict(type=T["HELLO"], sender=0)), b""],
        ]
        for frames in bad_frames:
            dealer.send_multipart(frames)
        answers = [dealer.recv_multipart() for _ in range(5)]
    finally:
        context.destroy(linger=0)
    texts = [a[1].decode() for a in answers]
    assert any("version mismatch" in t for t in texts), texts
    assert any("payload has 3 bytes" in t for t in texts), texts
    assert any("does not match connection 'intruder'" in t for t in texts), texts
    assert sum("does not match connection 'intruder'" in t for t in texts) == 2, texts

    go.touch()
    cluster.wait()
    cluster.assert_ok()
    for rank in range(2):
        assert "step 19 ok" in cluster.result("worker", rank).stdout
    log = cluster.result("server", 0).stderr
    assert "dropped a malformed message" in log and "dropped a message of 5 frames" in log


@pytest.mark.parametrize("role", ["server", "scheduler"])
def test_sigterm_mid_job_is_not_a_success(make_cluster, role):
    """A server or scheduler stopped by SIGTERM while workers still run exits 143 and says
    so: exit 0 would tell a cluster manager the job finished (it exited 0 before)."""
    cluster = make_cluster(2, 1, timeout=60, env={"TFPS_TIMEOUT": "60"})
    cluster.start([sys.executable, WORKER, "100000"])
    for rank in range(2):
        cluster.wait_for_output("worker", rank, "step 3 ok")
    cluster.kill(role, 0, signal.SIGTERM)
    result = cluster.wait_for(role, 0, timeout=20)
    assert result.returncode == 128 + signal.SIGTERM, result.describe()
    assert "stopped by SIGTERM before every worker finished; exiting with 143" in result.stderr

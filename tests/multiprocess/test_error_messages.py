"""Messages that sent people the wrong way, now saying what happened.

A peer that does not speak ZeroMQ was named by the server's own endpoint, as if it were the
peer; a worker whose identity another connection had taken was asked whether the server was
reachable; TFPS_BIND=256.1.1.1 passed as an interface name and was refused as a
non-loopback bind; TFPS_MAX_MESSAGE_BYTES above the automatic push budget blamed
TFPS_SERVER_PUSH_BYTES, which nobody had set.
"""

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq

from cluster import PS_SERVER, REPO, require_build
from hostile import Job

pytestmark = pytest.mark.timeout(120)
WORKER = Path(__file__).parent / "core_workers" / "loop_worker.py"
KEYLESS = {k: v for k, v in os.environ.items()
           if k not in ("TFPS_AUTH_KEY_FILE", "TFPS_BIND", "TFPS_INSECURE",
                        "TFPS_MAX_MESSAGE_BYTES", "TFPS_SERVER_PUSH_BYTES")}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_garbage_on_a_server_port_names_our_port_not_a_peer(make_cluster, tmp_path):
    go = tmp_path / "go"
    cluster = make_cluster(1, 1, timeout=60, env={"TFPS_TIMEOUT": "30"})
    cluster.start([sys.executable, WORKER, "2", "--wait-for", go])
    cluster.wait_for_output("worker", 0, "step 0 ok")
    result = cluster.wait_for_output("server", 0, "serving on port")
    port = int(re.search(r"serving on port (\d+)", result.stderr).group(1))
    with socket.socket() as raw:  # from another loopback address than the server's
        raw.bind(("127.0.0.2", 0))
        raw.settimeout(5)
        raw.connect(("127.0.0.1", port))
        # A ZMTP 3.0 greeting asking for a security mechanism the server does not use.
        raw.sendall(b"\xff" + bytes(8) + b"\x7f" + b"\x03\x00" + b"PLAIN".ljust(20, b"\0")
                    + bytes(32))
        time.sleep(0.2)
    result = cluster.wait_for_output("server", 0, f"a peer made to our port {port} ")
    assert f"dropped a connection from tcp://127.0.0.1:{port}" not in result.stderr
    assert "does not report the peer's address" in result.stderr, result.describe()
    go.touch()
    cluster.wait()
    cluster.assert_ok()


def test_a_worker_whose_identity_is_taken_is_told_so(tmp_path):
    require_build()
    port = free_port()
    job = Job(tmp_path, num_workers=1, server_port=port)
    try:
        # A stray connection takes worker 0's identity on the server before worker 0 comes.
        thief = job.socket(zmq.DEALER, b"w0")
        thief.connect(f"tcp://127.0.0.1:{port}")
        thief.send_multipart([b"hello?"])
        time.sleep(1)  # its handshake is done: the identity is its own
        env = {**job.env, "TFPS_SCHEDULER": f"127.0.0.1:{job.scheduler_port}", "TFPS_RANK": "0",
               "TFPS_SIZE": "1", "TFPS_NUM_SERVERS": "1", "TFPS_TIMEOUT": "4",
               "PYTHONPATH": str(REPO)}
        worker = subprocess.run([sys.executable, str(WORKER), "1"], capture_output=True,
                                text=True, timeout=60, env=env)
        assert worker.returncode == 3, worker.stderr
        assert "already holds this worker's identity 'w0'" in worker.stderr, worker.stderr
        assert f"127.0.0.1:{port}" in worker.stderr, worker.stderr
        assert "is it reachable" not in worker.stderr, worker.stderr
    finally:
        job.close()


def start_scheduler(tmp_path, **env):
    port_file = tmp_path / "port"
    proc = subprocess.run([PS_SERVER, "--role", "scheduler", "--port", "0", "--port-file",
                           str(port_file), "--num-workers", "1", "--num-servers", "1"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=30, env={**KEYLESS, **env})
    assert not port_file.exists(), "the scheduler started"
    return proc


@pytest.mark.parametrize("bind", ["256.1.1.1", "10.0.0", "1.2.3.4.5"])
def test_an_invalid_ipv4_bind_is_called_invalid(tmp_path, bind):
    require_build()
    proc = start_scheduler(tmp_path, TFPS_BIND=bind)
    assert proc.returncode != 0, proc.stderr
    assert f"TFPS_BIND='{bind}' is not a valid IPv4 address" in proc.stderr, proc.stderr
    assert "without authentication" not in proc.stderr, proc.stderr


def test_a_message_size_above_the_automatic_budget_names_itself(tmp_path):
    require_build()
    proc = start_scheduler(tmp_path, TFPS_BIND="127.0.0.1",
                           TFPS_MAX_MESSAGE_BYTES=str(2**40))
    assert proc.returncode != 0, proc.stderr
    assert f"TFPS_MAX_MESSAGE_BYTES={2**40} is out of range" in proc.stderr, proc.stderr
    assert re.search(r"it may be 4096\.\.\d+; lower it", proc.stderr), proc.stderr
    assert "is below TFPS_MAX_MESSAGE_BYTES" not in proc.stderr, proc.stderr
    # A budget set too low is the one named, with its range.
    proc = start_scheduler(tmp_path, TFPS_BIND="127.0.0.1", TFPS_MAX_MESSAGE_BYTES="65536",
                           TFPS_SERVER_PUSH_BYTES="8192")
    assert "TFPS_SERVER_PUSH_BYTES=8192 is below TFPS_MAX_MESSAGE_BYTES=65536" in proc.stderr
    assert f"set it to 65536..{2**50}" in proc.stderr, proc.stderr


@pytest.mark.parametrize("cycle", ["-1", "100001", "1.5ms"])
def test_a_bad_cycle_time_names_itself_and_its_range(tmp_path, cycle):
    require_build()
    proc = start_scheduler(tmp_path, TFPS_BIND="127.0.0.1", TFPS_CYCLE_US=cycle)
    assert proc.returncode != 0, proc.stderr
    assert f"TFPS_CYCLE_US='{cycle}' is not an integer in [0, 100000]" in proc.stderr, \
        proc.stderr

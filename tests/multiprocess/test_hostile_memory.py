"""Memory and logs under a hostile or stuck peer, measured on the real processes.

A client that floods garbage and never reads the error replies grew a server to 877 MB
(and 141 MB of log) in 18 s; a frame announced as 1 GiB was buffered whole; a routing id
with a newline forged log lines. Now every socket has high-water marks and
ZMQ_MAXMSGSIZE (TFPS_MAX_MESSAGE_BYTES), errors to a misbehaving peer are rate-limited
and peer ids are escaped in the log.
"""

import socket
import struct
import sys
import time
from pathlib import Path

import pytest
import zmq

from hostile import T, core, rss_kib, served_ports

WORKER = Path(__file__).parent / "core_workers" / "loop_worker.py"


def started_cluster(make_cluster, go, steps=20, io_threads=1):
    """A running job and its server's last port (its only one with one I/O thread)."""
    cluster = make_cluster(2, 1, timeout=90, env={"TFPS_TIMEOUT": "60",
                                                  "TFPS_IO_THREADS": str(io_threads)})
    cluster.start([sys.executable, WORKER, str(steps), "--wait-for", go])
    for rank in range(2):
        cluster.wait_for_output("worker", rank, "step 0 ok")
    ports = served_ports(cluster.wait_for_output("server", 0, "serving on port").stderr)
    assert len(ports) == io_threads, ports
    return cluster, ports[-1]


def finish(cluster, go, steps=20):
    go.touch()
    cluster.wait()
    cluster.assert_ok()
    for rank in range(2):
        assert f"step {steps - 1} ok" in cluster.result("worker", rank).stdout


def flood(port, seconds, routing_id):
    """Sends malformed messages as fast as it can for `seconds`, never reading."""
    context = zmq.Context()
    try:
        dealer = context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.SNDHWM, 0)
        dealer.setsockopt(zmq.ROUTING_ID, routing_id)
        dealer.connect(f"tcp://127.0.0.1:{port}")
        bad = [core.encode_head(dict(type=T["HELLO"], sender=0))]  # not worker 0's connection
        sent = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for _ in range(1000):
                try:
                    dealer.send_multipart(bad, zmq.NOBLOCK)
                    sent += 1
                except zmq.Again:
                    time.sleep(0.001)
        return sent
    finally:
        context.destroy(linger=0)


def test_garbage_flood_without_reading_keeps_server_and_scheduler_bounded(make_cluster,
                                                                          tmp_path):
    go = tmp_path / "go"
    cluster, port = started_cluster(make_cluster, go)
    server_pid = cluster.process("server", 0).pid
    scheduler_pid = cluster.process("scheduler", 0).pid
    before = rss_kib(server_pid), rss_kib(scheduler_pid)
    log_before = len(cluster.result("server", 0).stderr)
    sent = flood(port, 4.0, b"flood")
    sent += flood(cluster.port, 2.0, b"flood")
    time.sleep(0.5)
    after = rss_kib(server_pid), rss_kib(scheduler_pid)
    log_growth = len(cluster.result("server", 0).stderr) - log_before
    print(f"sent {sent} messages; server RSS {before[0]} -> {after[0]} KiB, scheduler "
          f"{before[1]} -> {after[1]} KiB, server log +{log_growth} bytes")
    assert sent > 10000, sent
    # ZeroMQ parks at most kSocketRcvHwm (1,000) unread messages per peer: ~1.5 MB here.
    # At 100,000 (its send bound) a server that fell behind held 30-50 MB of heads.
    assert after[0] - before[0] < 16 << 10, (before, after)
    assert after[1] - before[1] < 16 << 10, (before, after)
    assert log_growth < 64 << 10, log_growth
    # A few lines per peer per interval, not one per message (tests/unit/test_rate_limit.py).
    assert cluster.result("server", 0).stderr.count("'flood'") <= 20
    finish(cluster, go)


def zmtp_null_handshake(sock, routing_id=b""):
    """A ZMTP 3.0 DEALER greeting and READY over a raw TCP socket (NULL mechanism)."""
    sock.sendall(b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00")
                 + b"\x00" + b"\x00" * 31)
    props = b""
    for name, value in ((b"Socket-Type", b"DEALER"), (b"Identity", routing_id)):
        props += bytes([len(name)]) + name + struct.pack(">I", len(value)) + value
    body = b"\x05READY" + props
    sock.sendall(b"\x04" + bytes([len(body)]) + body)


# With two I/O threads, on the server's second port: ZMQ_MAXMSGSIZE holds on every one.
@pytest.mark.parametrize("io_threads", [1, 2])
def test_a_frame_announced_as_1_gib_is_refused(make_cluster, tmp_path, io_threads):
    go = tmp_path / "go"
    cluster, port = started_cluster(make_cluster, go, io_threads=io_threads)
    server_pid = cluster.process("server", 0).pid
    before = rss_kib(server_pid)
    streamed = 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        zmtp_null_handshake(raw)
        raw.sendall(b"\x02" + struct.pack(">Q", 1 << 30))  # one frame of 1 GiB follows
        chunk = b"\x00" * (1 << 20)
        try:
            while streamed < 400 << 20:
                raw.sendall(chunk)
                streamed += len(chunk)
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            pass
        peak = rss_kib(server_pid)
    print(f"streamed {streamed >> 20} MiB of the frame; server RSS {before} -> {peak} KiB")
    assert peak - before < 64 << 10, (before, peak)
    assert streamed < 400 << 20, "the server kept reading a frame above TFPS_MAX_MESSAGE_BYTES"
    finish(cluster, go)


def test_a_routing_id_with_a_newline_is_escaped_in_the_log(make_cluster, tmp_path):
    go = tmp_path / "go"
    cluster, port = started_cluster(make_cluster, go)
    context = zmq.Context()
    try:
        dealer = context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.ROUTING_ID, b"x\n[tfps server 0] ERROR: forged line")
        dealer.connect(f"tcp://127.0.0.1:{port}")
        dealer.send_multipart([core.encode_head(dict(type=T["HELLO"], sender=0))])
        assert dealer.poll(10000), "no rejection"
        dealer.recv_multipart()
    finally:
        context.destroy(linger=0)
    finish(cluster, go)
    log = cluster.result("server", 0).stderr
    assert "x\\n[tfps server 0] ERROR: forged line" in log, log
    assert not any(line.startswith("[tfps server 0] ERROR: forged")
                   for line in log.splitlines()), log

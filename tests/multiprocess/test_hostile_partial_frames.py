"""Connections that send most of a large frame and stop, before they are a member's
(cc/transport/connection_limits.h).

ZeroMQ buffers a frame whole, up to ZMQ_MAXMSGSIZE (TFPS_MAX_MESSAGE_BYTES), before the
role sees any of it. The per-frame limit therefore bounded nothing across connections:
four connections each holding a frame just under the limit grew the server and the
scheduler by four frames each, until they closed (a job without a key; with one, such a
client never gets past the handshake). Now a connection that has not sent a member's
message yet may hold 1 MiB, all of them together 32 MiB; beyond that the largest are
shut down, with a log line, and members are untouched.

Raw TCP clients speaking ZMTP themselves, on loopback.
"""

import socket
import struct
import time

import pytest

from hostile import Job, rss_kib
from test_hostile_replies import zmtp_connect

pytestmark = pytest.mark.timeout(120)

MIB = 1 << 20
MAX_MESSAGE = 64 * MIB
FRAME = MAX_MESSAGE - MIB  # just under the limit
CONNECTIONS = 4


def hold_partial_frame(port):
    """Connects, announces one FRAME-byte frame and sends all of it but 1 MiB; returns the
    socket (left open) and how much was sent before the role closed the connection."""
    sock, _ = zmtp_connect(port, b"")
    chunk = b"\x00" * MIB
    sent = 0
    try:
        sock.sendall(b"\x02" + struct.pack(">Q", FRAME))
        while sent < FRAME - MIB:
            sock.sendall(chunk)
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    return sock, sent


def settled_rss(pid, seconds=1.0):
    """The process's RSS in KiB once it has not moved by 1 MiB for `seconds` (at most 10 s)."""
    last, since, deadline = rss_kib(pid), time.monotonic(), time.monotonic() + 10
    while time.monotonic() - since < seconds and time.monotonic() < deadline:
        time.sleep(0.05)
        now = rss_kib(pid)
        if abs(now - last) > 1024:
            last, since = now, time.monotonic()
    return last


def test_partial_frames_of_connections_not_registered_are_bounded(tmp_path):
    job = Job(tmp_path, num_workers=1, env={"TFPS_MAX_MESSAGE_BYTES": str(MAX_MESSAGE)})
    held = []
    try:
        address = job.register_workers(1)
        server_port = int(address.rsplit(":", 1)[1])
        roles = {"scheduler": (job.scheduler, job.scheduler_port),
                 "server": (job.server, server_port)}
        grown = {}
        for name, (proc, port) in roles.items():
            before = settled_rss(proc.pid, 0.3)
            sent = []
            for _ in range(CONNECTIONS):
                sock, n = hold_partial_frame(port)
                held.append(sock)
                sent.append(n >> 20)
            after = settled_rss(proc.pid)
            grown[name] = (after - before) >> 10
            print(f"{name}: RSS {before >> 10} -> {after >> 10} MiB (+{grown[name]} MiB) with "
                  f"{CONNECTIONS} connections holding partial frames of {FRAME >> 20} MiB "
                  f"(MiB sent each before being closed: {sent})")
            assert proc.poll() is None
        for name, growth in grown.items():
            # Before: the four frames, about 4 x 63 MiB, held by each role.
            assert growth < 24, (name, growth)
        job.scheduler_log.flush()
        scheduler_log = (tmp_path / "scheduler.log").read_text()
        for log in (scheduler_log, job.server_log_text()):
            assert "that held" in log and "of messages not yet complete" in log, log[-2000:]
        # Members are untouched: the registered worker says hello to the server.
        job.connect_worker(address, 0)
    finally:
        for sock in held:
            sock.close()
        job.close()

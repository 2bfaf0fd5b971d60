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

import os
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


def hold_partial_frame(port, frame=FRAME, left=MIB):
    """Connects, announces one `frame`-byte frame and sends all of it but `left` bytes;
    returns the socket (left open) and how much was sent before the role closed it."""
    sock, _ = zmtp_connect(port, b"")
    chunk = b"\x00" * (64 << 10)
    sent = 0
    try:
        sock.sendall(b"\x02" + struct.pack(">Q", frame))
        while sent < frame - left:
            n = min(len(chunk), frame - left - sent)
            sock.sendall(chunk[:n])
            sent += n
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


def attack(proc, port, connections, frame, left, held):
    """Holds `connections` partial frames on `port`; (MiB grown, MiB sent per connection)."""
    before = settled_rss(proc.pid, 0.3)
    sent = []
    for _ in range(connections):
        sock, n = hold_partial_frame(port, frame, left)
        held.append(sock)
        sent.append(round(n / MIB, 1))
    after = settled_rss(proc.pid)
    assert proc.poll() is None
    return (after - before) / 1024, sent


def log_of(job, tmp_path, role):
    if role == "server":
        return job.server_log_text()
    job.scheduler_log.flush()
    return (tmp_path / "scheduler.log").read_text()


def test_a_server_cuts_connections_holding_partial_frames_before_a_hello(tmp_path):
    job = Job(tmp_path, num_workers=1, env={"TFPS_MAX_MESSAGE_BYTES": str(MAX_MESSAGE)})
    held = []
    try:
        address = job.register_workers(1)
        port = int(address.rsplit(":", 1)[1])
        grown, sent = attack(job.server, port, CONNECTIONS, FRAME, MIB, held)
        print(f"server: +{grown:.0f} MiB with {CONNECTIONS} connections holding partial "
              f"frames of {FRAME >> 20} MiB (MiB sent each before being closed: {sent})")
        # Before: the four frames, 4 x 62 MiB, held until the connections closed.
        assert grown < 24, grown
        log = log_of(job, tmp_path, "server")
        assert "that held" in log and "of messages not yet complete" in log, log[-2000:]
        # Members are untouched: the registered worker says hello to the server.
        job.connect_worker(address, 0)
    finally:
        for sock in held:
            sock.close()
        job.close()


def test_a_scheduler_bounds_partial_frames_of_connections_not_registered(tmp_path):
    job = Job(tmp_path, num_workers=1, env={"TFPS_MAX_MESSAGE_BYTES": str(MAX_MESSAGE)},
              server=False)
    held = []
    try:
        # Frames above the scheduler's own 1 MiB limit: refused as announced.
        grown, sent = attack(job.scheduler, job.scheduler_port, CONNECTIONS, FRAME, MIB, held)
        print(f"scheduler: +{grown:.0f} MiB with {CONNECTIONS} connections holding partial "
              f"frames of {FRAME >> 20} MiB (MiB sent each before being closed: {sent})")
        assert grown < 24, grown  # before: 4 x 62 MiB
        # Many frames under it, 0.875 MiB each: together at most 32 MiB stay, i.e. the
        # scheduler keeps at most 37 of those connections open.
        many, frame, left = 100, 960 << 10, 64 << 10
        fds_before = len(os.listdir(f"/proc/{job.scheduler.pid}/fd"))
        grown, sent = attack(job.scheduler, job.scheduler_port, many, frame, left, held)
        kept = len(os.listdir(f"/proc/{job.scheduler.pid}/fd")) - fds_before
        print(f"scheduler: +{grown:.0f} MiB, {kept} of {many} connections kept, holding partial "
              f"frames of {(frame - left) / MIB:.3f} MiB each")
        assert kept <= (32 * MIB) // (frame - left) + 1, kept  # before: all 100
        assert grown < 64, grown  # before: +91 MiB; some is the allocator's, freed or not
        log = log_of(job, tmp_path, "scheduler")
        assert "that held" in log and "of messages not yet complete" in log, log[-2000:]
        # A member registers all the same.
        job.start_server()
        assert job.register_workers(1).startswith("127.0.0.1:")
    finally:
        for sock in held:
            sock.close()
        job.close()

"""Connections that send most of a large frame and stop, before they are a member's
(cc/transport/connection_limits.h).

ZeroMQ buffers a frame whole, up to ZMQ_MAXMSGSIZE (TFPS_MAX_MESSAGE_BYTES), before the
role sees any of it. The per-frame limit therefore bounded nothing across connections:
four connections each holding a frame just under the limit grew the server and the
scheduler by four frames each, until they closed (a job without a key; with one, such a
client never gets past the handshake). Now a connection that has not sent a member's
message yet may hold 1 MiB, all of them together 32 MiB; beyond that the largest are
shut down, with a log line, and members are untouched. The same holds for each worker's
peer port (allgather/alltoall), where a connection is a member's once a peer's message
(the empty probe each peer sends first) arrives on it.

Raw TCP clients speaking ZMTP themselves, on loopback.
"""

import os
import socket
import struct
import subprocess
import sys
import time

import numpy as np

import pytest

from hostile import Job, rss_kib, served_ports
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
    """Holds `connections` partial frames on `port` (a list: on each in turn); (MiB grown,
    MiB sent per connection)."""
    ports = port if isinstance(port, list) else [port]
    before = settled_rss(proc.pid, 0.3)
    sent = []
    for i in range(connections):
        sock, n = hold_partial_frame(ports[i % len(ports)], frame, left)
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


# With two I/O threads the server listens on two ports; the connections alternate between
# them and the bound holds for them together.
@pytest.mark.parametrize("io_threads", [1, 2])
def test_a_server_cuts_connections_holding_partial_frames_before_a_hello(tmp_path, io_threads):
    job = Job(tmp_path, num_workers=1, env={"TFPS_MAX_MESSAGE_BYTES": str(MAX_MESSAGE),
                                            "TFPS_IO_THREADS": str(io_threads)})
    held = []
    try:
        address = job.register_workers(1)
        deadline = time.monotonic() + 30  # the server logs its ports once registered
        while not served_ports(job.server_log_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        ports = served_ports(job.server_log_text())
        assert len(ports) == io_threads and address.endswith(f":{ports[0]}"), (ports, address)
        grown, sent = attack(job.server, ports, CONNECTIONS, FRAME, MIB, held)
        print(f"server: +{grown:.0f} MiB with {CONNECTIONS} connections holding partial "
              f"frames of {FRAME >> 20} MiB (MiB sent each before being closed: {sent})")
        # Before: the four frames, 4 x 62 MiB, held until the connections closed.
        assert grown < 24, grown
        log = log_of(job, tmp_path, "server")
        assert "that held" in log and "of messages not yet complete" in log, log[-2000:]
        assert "connection(s) to tcp://127.0.0.1:" + ",".join(map(str, ports)) + " " in log
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


GATHER = r"""
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from native import init_from_env, load_core
core = load_core()
rank, size = init_from_env(core)
print("ready", flush=True)
sys.stdin.readline()  # the test's attack is over
parts = core.allgather("g", np.arange(3 + rank, dtype=np.float32) * (rank + 1))
print("gathered", repr([p.tolist() for p in parts]), flush=True)
core.shutdown()
"""


def listening_ports(pid):
    """The TCP ports process `pid` listens on (IPv4: its descriptors' inodes in /proc/net/tcp)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    with open(f"/proc/{pid}/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_a_worker_peer_port_bounds_partial_frames_of_connections_no_peer_spoke_on(tmp_path):
    # Two real workers, no key; the test holds partial frames on worker 0's peer port.
    job = Job(tmp_path, num_workers=2, env={"TFPS_MAX_MESSAGE_BYTES": str(MAX_MESSAGE),
                                            "TFPS_TIMEOUT": "30"})
    workers, held = [], []
    try:
        here = os.path.join(os.path.dirname(__file__), "..")
        for rank in range(2):
            env = dict(job.env, TFPS_SCHEDULER=f"127.0.0.1:{job.scheduler_port}",
                       TFPS_RANK=str(rank), TFPS_SIZE="2", TFPS_NUM_SERVERS="1",
                       OMP_NUM_THREADS="1")
            workers.append(subprocess.Popen(
                [sys.executable, "-c", GATHER, here], env=env, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for w in workers:
            assert w.stdout.readline().strip() == "ready", w.communicate(timeout=30)
        ports = listening_ports(workers[0].pid)
        assert len(ports) == 1, ports  # its peer port, bound to 127.0.0.1
        grown, sent = attack(workers[0], ports.pop(), CONNECTIONS, FRAME, MIB, held)
        print(f"worker 0's peer port: +{grown:.0f} MiB with {CONNECTIONS} connections holding "
              f"partial frames of {FRAME >> 20} MiB (MiB sent each before being closed: {sent})")
        assert grown < 24, grown  # before: 4 x 62 MiB
        # The peers' own connections are untouched: the job gathers.
        outs = []
        for w in workers:
            w.stdin.write("go\n")
            w.stdin.flush()
        for w in workers:
            outs.append(w.communicate(timeout=60))
        for rank, (w, (out, err)) in enumerate(zip(workers, outs)):
            assert w.returncode == 0, (rank, out, err)
            parts = eval(out.split("gathered", 1)[1].strip())
            want = [(np.arange(3 + r, dtype=np.float32) * (r + 1)).tolist() for r in range(2)]
            assert parts == want, (rank, parts, want)
        assert "that held" in outs[0][1] and "of messages not yet complete" in outs[0][1], \
            outs[0][1][-2000:]
    finally:
        for sock in held:
            sock.close()
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
        job.close()

"""Replies a worker never reads count against the server's budget (TFPS_SERVER_PUSH_BYTES,
ps_server/push_budget.h).

A push "without data" carries a 64-byte head but stands for count x element size of
zeros, which the server allocates as the reply. The budget counted only what pushes
carried, so a member that never read pinned that much per push: eight such pushes of
2^26 float32 grew a 1-worker job's server from 7 to 2,055 MB, held until the member left.
Now a push counts the reply it stands for before it is taken, and a reply counts against
its worker until ZeroMQ has written it: past the budget the pushes are refused, and once
the worker reads, the same server answers again.

The worker is a raw TCP socket speaking ZMTP itself, so that nothing reads on its side
(a ZeroMQ socket's I/O thread would read replies into its own queue).
"""

import socket
import struct
import time

import numpy as np
import pytest
import zmq

from hostile import Job, T, core, rss_kib

pytestmark = pytest.mark.timeout(120)

MIB = 1 << 20
F32 = core.wire_dtype(np.dtype(np.float32))
LIMIT = 64 * MIB
COUNT = LIMIT // 4  # float32 elements: one reply is the whole budget
PUSHES = 8


def zmtp_connect(port, routing_id):
    """A raw ZMTP 3.0 DEALER (NULL mechanism) with a small receive buffer."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 10)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00")
                 + b"\x00" + b"\x00" * 31)
    # Our READY only once the server's greeting and READY are in (libzmq closes the
    # connection otherwise, now and then).
    reader = ZmtpReader(sock)
    reader.exact(64)
    flags, size = reader.exact(2)
    assert flags == 4 and reader.exact(size).startswith(b"\x05READY")
    props = b""
    for name, value in ((b"Socket-Type", b"DEALER"), (b"Identity", routing_id)):
        props += bytes([len(name)]) + name + struct.pack(">I", len(value)) + value
    body = b"\x05READY" + props
    sock.sendall(b"\x04" + bytes([len(body)]) + body)
    return sock, reader


def zmtp_send(sock, frames):
    out = b""
    for i, frame in enumerate(frames):
        more = 1 if i + 1 < len(frames) else 0
        if len(frame) < 256:
            out += bytes([more]) + bytes([len(frame)]) + frame
        else:
            out += bytes([more | 2]) + struct.pack(">Q", len(frame)) + frame
    sock.sendall(out)


class ZmtpReader:
    """Reads whole messages (lists of frames) from a raw ZMTP connection."""

    def __init__(self, sock):
        self.sock = sock

    def exact(self, n):
        chunks, left = [], n
        while left:
            chunk = self.sock.recv(min(left, 4 << 20))
            assert chunk, "the server closed the connection"
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def message(self):
        frames = []
        while True:
            flags = self.exact(1)[0]
            size = struct.unpack(">Q", self.exact(8))[0] if flags & 2 else self.exact(1)[0]
            body = self.exact(size)
            if flags & 4:  # a command (READY, PING): not a message
                continue
            frames.append(body)
            if not flags & 1:
                return frames


def replies(frames):
    """A server's message as [(fields, payload)]: one reply, or each of a batch's."""
    if len(frames) > 2:  # [batch head][head][payload]...
        frames = frames[1:]
    out = []
    for i in range(0, len(frames), 2):
        payload = frames[i + 1] if i + 1 < len(frames) else b""
        err, fields = core.decode_head(frames[i], len(payload))
        assert err is None, err
        out.append((fields, payload))
    return out


def no_data_push(key):
    head = core.encode_head(dict(type=T["PUSH_PULL"], key=key, partition=0, num_partitions=1,
                                 step=0, dtype=F32, sender=0, count=COUNT, total_count=COUNT,
                                 flags=core.FLAG_NO_DATA), [COUNT])
    return [head, b""]


def test_unread_replies_of_pushes_without_data_count_against_the_budget(tmp_path):
    job = Job(tmp_path, num_workers=1,
              env={"TFPS_SERVER_PUSH_BYTES": str(LIMIT), "TFPS_MAX_MESSAGE_BYTES": str(LIMIT),
                   "TFPS_SERVER_THREADS": "1", "TFPS_SHM_SERVER": "0"})
    sock = None
    try:
        address = job.register_workers(1)
        port = int(address.rsplit(":", 1)[1])
        sock, reader = zmtp_connect(port, b"w0")
        zmtp_send(sock, [core.encode_head(dict(type=T["HELLO"], sender=0))])
        pid = job.server.pid
        time.sleep(0.5)
        before = rss_kib(pid)
        for key in range(PUSHES):  # 8 x 64 MiB of zeros asked for, none read
            zmtp_send(sock, no_data_push(100 + key))
        peak, last, last_change = before, before, time.monotonic()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and time.monotonic() - last_change < 2.0:
            assert job.server.poll() is None, job.server_log_text()[-3000:]
            now = rss_kib(pid)
            if abs(now - last) > 1024:
                last_change, last = time.monotonic(), now
            peak = max(peak, now)
            time.sleep(0.05)
        grown = (peak - before) >> 10
        print(f"server RSS {before >> 10} -> {peak >> 10} MiB (+{grown} MiB) after {PUSHES} "
              f"unread pushes without data of {LIMIT >> 20} MiB, TFPS_SERVER_PUSH_BYTES="
              f"{LIMIT >> 20} MiB")
        # One reply (the whole budget) is held; without the count it was all eight.
        assert grown < 2 * (LIMIT >> 20) + 32, grown
        log = job.server_log_text()
        assert "refused worker 0's push of tensor key" in log, log[-3000:]
        assert "replies not yet read" in log, log[-3000:]

        # Reading frees the budget: every push was answered (the first with its zeros, the
        # others with the refusal), and a new one is taken again.
        got = []
        while len(got) < PUSHES + 1:  # the hello's answer too
            got += replies(reader.message())
        kinds = [fields["type"] for fields, _ in got]
        assert kinds.count(T["HELLO_REPLY"]) == 1, kinds
        sums = [(f, p) for f, p in got if f["type"] == T["PUSH_PULL_REPLY"]]
        errors = [(f, p) for f, p in got if f["type"] == T["ERROR"]]
        assert len(sums) >= 1 and len(sums) + len(errors) == PUSHES, kinds
        assert all(b"TFPS_SERVER_PUSH_BYTES" in p for _, p in errors), errors[:1]
        assert len(sums[0][1]) == LIMIT and not np.frombuffer(sums[0][1], np.float32).any()
        zmtp_send(sock, no_data_push(200))
        (fields, payload), = replies(reader.message())
        assert fields["type"] == T["PUSH_PULL_REPLY"] and fields["key"] == 200, (fields, payload[:200])
        assert len(payload) == LIMIT
    finally:
        if sock is not None:
            sock.close()
        job.close()


def test_rounds_opened_by_pushes_without_data_count_while_they_wait(tmp_path):
    """A member that pushes tiny pushes without data to distinct tensors its peer never
    pushes opens a round each, which waits for TFPS_TIMEOUT: the push that opened it now
    counts (at least 4 KiB) until the round ends, so past its share the pushes are refused
    instead of each leaving its round's bookkeeping behind."""
    limit, flood = 16 * MIB, 200_000
    job = Job(tmp_path, num_workers=2,
              env={"TFPS_SERVER_PUSH_BYTES": str(limit), "TFPS_MAX_MESSAGE_BYTES": str(limit),
                   "TFPS_SERVER_THREADS": "1", "TFPS_SHM_SERVER": "0", "TFPS_TIMEOUT": "60"})
    try:
        address = job.register_workers(2)
        honest, flooder = [job.connect_worker(address, rank) for rank in range(2)]
        flooder.setsockopt(zmq.SNDHWM, 0)
        pid = job.server.pid
        before = rss_kib(pid)
        for key in range(flood):
            head = core.encode_head(dict(type=T["PUSH_PULL"], key=1000 + key, partition=0,
                                         num_partitions=1, step=0, dtype=F32, sender=1,
                                         count=1, total_count=1, flags=core.FLAG_NO_DATA), [1])
            flooder.send_multipart([head, b""])
        last, since, deadline = before, time.monotonic(), time.monotonic() + 30
        while time.monotonic() - since < 2.0 and time.monotonic() < deadline:
            time.sleep(0.05)
            now = rss_kib(pid)
            if abs(now - last) > 512:
                last, since = now, time.monotonic()
        grown = (last - before) / 1024
        print(f"server RSS {before >> 10} -> {last >> 10} MiB (+{grown:.0f} MiB) after {flood} "
              f"pushes without data opening rounds that wait, TFPS_SERVER_PUSH_BYTES="
              f"{limit >> 20} MiB")
        assert job.server.poll() is None, job.server_log_text()[-3000:]
        log = job.server_log_text()
        assert "refused worker 1's push of tensor key" in log, log[-3000:]
        # At most its share (8 MiB) of 4 KiB pushes (about 2,000 open rounds), 1 MiB of
        # refusals, and what ZeroMQ queued on the way in while the server fell behind (a
        # loaded machine: up to 100,000 messages) as the allocator keeps it; before, each
        # round stayed: +118 MiB.
        assert grown < 60, grown
    finally:
        job.close()


def test_compressed_pushes_count_the_float32_sum_their_round_holds(tmp_path):
    """A topk push keeping 256 elements of 2^24 (the least it may) carries 2 KiB, but its
    round decodes it into a 64 MiB float32 sum that waits for the other worker: it counted
    4 KiB, so eight of them to tensors the other worker never pushes pinned 512 MiB. Now it
    counts the sum, for as long as the round holds it."""
    count, pushes = COUNT, PUSHES
    job = Job(tmp_path, num_workers=2,
              env={"TFPS_SERVER_PUSH_BYTES": str(LIMIT), "TFPS_MAX_MESSAGE_BYTES": str(LIMIT),
                   "TFPS_SERVER_THREADS": "1", "TFPS_SHM_SERVER": "0", "TFPS_TIMEOUT": "60"})
    try:
        address = job.register_workers(2)
        honest, flooder = [job.connect_worker(address, rank) for rank in range(2)]
        topk = core.CODECS["topk"]
        x = np.zeros(count, np.float32)
        x[:256] = 1.0
        payload = bytes(core.codec_encode(topk, x, 256, 0))
        pid = job.server.pid
        before = rss_kib(pid)
        for key in range(pushes):
            head = core.encode_head(dict(type=T["PUSH_PULL"], key=500 + key, partition=0,
                                         num_partitions=1, step=0, dtype=F32, sender=1,
                                         count=count, total_count=count, codec=topk), [count])
            flooder.send_multipart([head, payload])
        last, since, deadline = before, time.monotonic(), time.monotonic() + 30
        while time.monotonic() - since < 2.0 and time.monotonic() < deadline:
            time.sleep(0.05)
            now = rss_kib(pid)
            if abs(now - last) > 1024:
                last, since = now, time.monotonic()
        grown = (last - before) >> 10
        print(f"server RSS {before >> 10} -> {last >> 10} MiB (+{grown} MiB) after {pushes} "
              f"topk pushes of {len(payload)} bytes standing for {count * 4 >> 20} MiB sums "
              f"that wait, TFPS_SERVER_PUSH_BYTES={LIMIT >> 20} MiB")
        assert job.server.poll() is None, job.server_log_text()[-3000:]
        assert "refused worker 1's push of tensor key" in job.server_log_text()
        assert grown < 2 * (LIMIT >> 20) + 32, grown
    finally:
        job.close()

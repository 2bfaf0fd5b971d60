"""Heartbeats cover a server's summation threads (ps_server/thread_watch.h): a server whose
summation thread is wedged while its I/O thread runs used to answer every ping and look
alive; its workers waited TFPS_TIMEOUT. Now it stops answering once a thread has made no
progress for TFPS_HEARTBEAT_TIMEOUT, names the thread (a warning every member hears), and
the scheduler names the server hung within seconds.

The wedge is a real one, no test hook: TFPS_CONSISTENCY_TRACE makes each summation thread
append a line per answer to reads-S-T.txt; the test makes thread 1's file a FIFO it opens
but never reads, so that thread blocks in write() once the pipe (64 KiB) is full, as on a
hung disk. The test plays both workers over raw sockets against a real scheduler and
ps_server (tests/multiprocess/hostile.py).
"""

import os
import time

import numpy as np
import pytest

from hostile import Job, T, core

pytestmark = pytest.mark.timeout(120)

F32 = core.wire_dtype(np.dtype(np.float32))


def pump(socket, notices):
    """Answers the scheduler's pings on `socket` (a healthy worker), keeps its notices."""
    while socket.poll(0):
        frames = socket.recv_multipart()
        err, fields = core.decode_head(frames[0], len(frames[1]) if len(frames) > 1 else 0)
        assert err is None, err
        if fields["type"] == T["PING"]:
            socket.send_multipart([core.encode_head(dict(type=T["PONG"], step=fields["step"])),
                                   b""])
        elif fields["type"] == T["MEMBER_NOTICE"]:
            notices.append(frames[1].decode(errors="replace"))


def test_a_wedged_summation_thread_makes_its_server_hung(tmp_path):
    trace = tmp_path / "trace"
    trace.mkdir()
    fifo = trace / "reads-0-1.txt"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # the server's open succeeds; never read
    job = Job(tmp_path, num_workers=2,
              env={"TFPS_HEARTBEAT_TIMEOUT": "2", "TFPS_TIMEOUT": "60", "TFPS_SERVER_THREADS": "2",
                   "TFPS_CONSISTENCY_TRACE": str(trace), "TFPS_SHM_SERVER": "0"})
    try:
        address = job.register_workers(2, "asp")
        w0, w1 = [job.connect_worker(address, rank) for rank in range(2)]
        notices = [[], []]
        one = np.ones(1, np.float32)
        # A healthy server first: the scheduler counts a member's silence only from its
        # first answer (liveness.h).
        healthy_until = time.monotonic() + 2.0
        while time.monotonic() < healthy_until:
            for rank in range(2):
                pump(job.registrants[rank], notices[rank])
            time.sleep(0.02)
        assert notices == [[], []], notices
        # asp answers each push at once: one trace line each, on the key's thread. Long
        # keys make long lines: half of these fill thread 1's pipe several times over.
        for step in range(400):
            for k in range(16):
                key = 10 ** 18 + k
                fields = dict(type=T["PUSH_PULL"], key=key, partition=0, num_partitions=1,
                              step=step, dtype=F32, sender=0, count=1, total_count=1)
                w0.send_multipart([core.encode_head(fields, [1]), one.tobytes()])
            while w0.poll(0):
                w0.recv_multipart()
            for rank in range(2):
                pump(job.registrants[rank], notices[rank])
        pushed = time.monotonic()
        deadline = pushed + 40  # far below TFPS_TIMEOUT's 60 s
        hung = []
        while not hung and time.monotonic() < deadline:
            for rank in range(2):
                pump(job.registrants[rank], notices[rank])
            while w0.poll(0):
                w0.recv_multipart()
            hung = [n for n in notices[0] if "is hung" in n]
            time.sleep(0.02)
        print(f"named hung {time.monotonic() - pushed:.1f} s after the last push")
        assert hung, ("the server was never named hung", "\n####\n".join(notices[0]),
                      job.server_log_text()[-3000:])
        assert "about=server:0" in hung[0] and "server 0" in hung[0], hung[0]
        assert "a summation thread" in hung[0], hung[0]
        # Before that, every member heard which thread, doing what.
        named = [n for n in notices[0] if "summation thread 1 of server 0 has made no progress"
                 in n]
        assert named and "handling a push" in named[0], notices[0]
        assert notices[1] == notices[0]
        log = job.server_log_text()
        assert "summation thread 1 of server 0 has made no progress" in log, log[-3000:]
        assert "summation thread 0 of" not in log, log[-3000:]
        # The server exits by itself (not hung in a join on the wedged thread) once its
        # workers are gone.
        for s in [w0, w1] + job.registrants:
            s.close(linger=0)
        assert job.server.wait(timeout=30) == 1, job.server_log_text()[-3000:]
        assert "exiting without it" in job.server_log_text(), job.server_log_text()[-3000:]
    finally:
        job.close()
        os.close(reader)

"""Application heartbeats (wire PING / PONG, ps_server/liveness.h): a member whose
serving thread hangs while its process and connection live is named to every member in
seconds. ZeroMQ's own heartbeats cannot see it: libzmq's I/O thread answers them.

The test plays both workers with pyzmq against a real scheduler and ps_server: worker 0
answers every ping; worker 1 answers the first ones and then stops (as a stuck engine
thread would), keeping its connection open.
"""

import time

import pytest

from hostile import Job, T, core

pytestmark = pytest.mark.timeout(120)


def pump(socket, answer, notices):
    """Reads what the scheduler sent `socket`: answers pings if `answer`, keeps notices."""
    while socket.poll(0):
        frames = socket.recv_multipart()
        err, fields = core.decode_head(frames[0], len(frames[1]) if len(frames) > 1 else 0)
        assert err is None, err
        if fields["type"] == T["PING"] and answer:
            socket.send_multipart([core.encode_head(dict(type=T["PONG"], step=fields["step"])),
                                   b""])
        elif fields["type"] == T["MEMBER_NOTICE"]:
            notices.append(frames[1].decode(errors="replace"))


def test_a_worker_whose_thread_stops_answering_is_named_hung(tmp_path):
    job = Job(tmp_path, num_workers=2, env={"TFPS_HEARTBEAT_TIMEOUT": "2", "TFPS_TIMEOUT": "60"})
    try:
        job.register_workers(2)
        healthy, stuck = job.registrants
        notices, stuck_notices = [], []
        answering_until = time.monotonic() + 2.0
        give_up = time.monotonic() + 40  # far below TFPS_TIMEOUT's 60 s
        while not notices and time.monotonic() < give_up:
            pump(healthy, True, notices)
            pump(stuck, time.monotonic() < answering_until, stuck_notices)
            time.sleep(0.02)
        assert notices, "worker 0 was never told that worker 1 hangs"
        assert "about=worker:1" in notices[0] and "worker 1 (127.0.0.1) is hung" in notices[0], \
            notices
        assert "2 x TFPS_HEARTBEAT_TIMEOUT=2 s" in notices[0], notices
        # The server heard it too, and treats the worker as gone; the healthy worker and
        # the server itself (its I/O thread answers) were never taken for hung.
        deadline = time.monotonic() + 20
        while "worker 1 is gone" not in job.server_log_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "worker 1 is gone" in job.server_log_text(), job.server_log_text()[-3000:]
        job.scheduler_log.flush()
        scheduler_log = open(job.scheduler_log.name).read()
        hung = [line for line in scheduler_log.splitlines() if "is hung" in line]
        assert len(hung) == 1 and "worker 1 (127.0.0.1) is hung" in hung[0], scheduler_log[-3000:]
    finally:
        job.close()


def test_ping_and_pong_decode():
    for name in ("PING", "PONG"):
        err, fields = core.decode_head(core.encode_head(dict(type=T[name], step=7)), 0)
        assert err is None and fields["type"] == T[name] and fields["step"] == 7

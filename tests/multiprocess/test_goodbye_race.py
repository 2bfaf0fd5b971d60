"""A worker's goodbye followed at once by its connection's close.

The scheduler and each server learn of a closed connection from ZeroMQ's monitor, on a
socket apart from the messages: the goodbye and the close can arrive in the same poll, the
close read first. Judged at once, a worker that said goodbye would be taken for a dead one
and the job would exit 1 (seen once in 64 workers on 8 emulated hosts). Here the test plays
every worker, and each says goodbye and closes in the same instant."""

import subprocess

import pytest
import zmq

from hostile import Job, T, core

WORKERS = 48
ROUNDS = 3


def say_goodbye_and_close(sockets, rank_of):
    for s in sockets:
        s.setsockopt(zmq.LINGER, 2000)  # the goodbye goes out; the close follows at once
        s.send_multipart([core.encode_head(dict(type=T["BYE"], sender=rank_of[s]))])
        s.close()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("round_", range(ROUNDS))
def test_a_goodbye_then_a_close_is_a_goodbye(tmp_path, round_):
    job = Job(tmp_path, num_workers=WORKERS)
    try:
        server = job.register_workers(WORKERS)
        to_server = [job.connect_worker(server, rank) for rank in range(WORKERS)]
        rank_of = {s: rank for rank, s in enumerate(to_server)}
        rank_of.update({s: rank for rank, s in enumerate(job.registrants)})
        # Interleaved, so that closes reach each role while goodbyes are still coming in.
        for rank in range(WORKERS):
            say_goodbye_and_close([to_server[rank], job.registrants[rank]], rank_of)
        try:
            codes = [job.server.wait(timeout=60), job.scheduler.wait(timeout=60)]
        except subprocess.TimeoutExpired:
            pytest.fail("a role did not exit after every worker's goodbye:\n"
                        + job.server_log_text())
        job.scheduler_log.flush()
        scheduler_log = job.scheduler_log.name
        with open(scheduler_log, errors="replace") as f:
            scheduler_text = f.read()
        assert codes == [0, 0], ("exit codes (server, scheduler): %s\n--- server\n%s\n"
                                 "--- scheduler\n%s" % (codes, job.server_log_text(),
                                                        scheduler_text))
        assert "gone" not in scheduler_text and "vanished" not in job.server_log_text()
    finally:
        job.close()

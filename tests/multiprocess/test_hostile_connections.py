"""Half-open connections: TCP connections that never start ZeroMQ's handshake.

Before, 2,000 of them, reopened as they closed, held the scheduler at its 1,024-descriptor
soft limit: it accepted nothing else, spun on the listener, logged nothing, and real
registrations waited. Now every role raises its soft RLIMIT_NOFILE to the hard limit, the
scheduler and servers stop listening while a quarter of it (at most 1,024) are pending in
the handshake (each ends after ZMQ_HANDSHAKE_IVL, 10 s), say so in the log, and listen
again once they have ended; a real registration goes through.
"""

import os
import resource
import socket
import subprocess
import sys
import time

import pytest

from cluster import REPO, require_build
from hostile import Job

pytestmark = pytest.mark.timeout(120)
SOFT, HARD = 128, 512  # the roles start with these; the cap is then 512 / 4 = 128


def low_descriptor_limit():
    resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT, HARD))


def descriptor_limits(pid):
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
    raise RuntimeError(f"no descriptor limit for {pid}")


def open_descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_every_role_raises_its_soft_descriptor_limit(tmp_path):
    require_build()
    job = Job(tmp_path, preexec_fn=low_descriptor_limit)
    try:
        for proc in (job.scheduler, job.server):
            assert descriptor_limits(proc.pid) == (HARD, HARD)
        code = ("import resource, sys; sys.path.insert(0, 'tests')\n"
                "from native import init_from_env, load_core\n"
                "core = load_core(); init_from_env(core)\n"
                "print(resource.getrlimit(resource.RLIMIT_NOFILE)); core.shutdown()\n")
        env = {**job.env, "TFPS_SCHEDULER": f"127.0.0.1:{job.scheduler_port}", "TFPS_RANK": "0",
               "TFPS_SIZE": "1", "TFPS_NUM_SERVERS": "1", "PYTHONPATH": str(REPO)}
        worker = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                cwd=REPO, timeout=60, env=env, preexec_fn=low_descriptor_limit)
        assert worker.returncode == 0, worker.stderr
        assert worker.stdout.strip() == f"({HARD}, {HARD})", worker.stdout + worker.stderr
    finally:
        job.close()


def test_half_open_connections_are_capped_logged_and_registration_goes_on(tmp_path):
    require_build()
    job = Job(tmp_path, preexec_fn=low_descriptor_limit)
    held, refused, most = [], 0, 0
    try:
        # Four times the cap, none of which ever says a word.
        for _ in range(4 * 128):
            try:
                held.append(socket.create_connection(("127.0.0.1", job.scheduler_port),
                                                     timeout=5))
            except OSError:
                refused += 1
            if len(held) % 32 == 0:
                most = max(most, open_descriptors(job.scheduler.pid))
        time.sleep(1)
        most = max(most, open_descriptors(job.scheduler.pid))
        print(f"scheduler descriptors at most {most}; {refused} connection(s) refused")
        assert refused > 0, "the scheduler never stopped accepting"
        assert most < HARD - 64, most  # descriptors left for the job's own use
        job.scheduler_log.flush()
        log = (tmp_path / "scheduler.log").read_text()
        assert "stops accepting connections on tcp://127.0.0.1:" in log, log
        assert "have not completed ZeroMQ's handshake (the cap is 128" in log, log
        # The half-open ones still held: a real member gets in once they end (10 s).
        assert job.register_workers(1).startswith("127.0.0.1:")
        job.scheduler_log.flush()
        assert "accepts connections on tcp://127.0.0.1:" in (tmp_path / "scheduler.log").read_text()
        assert job.scheduler.poll() is None
    finally:
        for s in held:
            s.close()
        job.close()

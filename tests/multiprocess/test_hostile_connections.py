"""Half-open connections: TCP connections that never send a message.

Before, 2,000 of them, reopened as they closed, held the scheduler at its 1,024-descriptor
soft limit: it accepted nothing else, spun on the listener, logged nothing, and real
registrations waited. Now every role raises its soft RLIMIT_NOFILE to the hard limit, and
the scheduler and servers, once a quarter of it (at most 1,024) connections are open
without having sent a word, shut down those silent for over 2 s, saying so in the log;
members, whose first message comes at once, are untouched and registrations go through.
"""

import os
import re
import resource
import select
import socket
import subprocess
import sys
import time

import pytest

from cluster import REPO, require_build
from hostile import Job

pytestmark = pytest.mark.timeout(120)
SOFT, HARD = 128, 512  # the roles start with these limits


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
        registered = time.monotonic() + 30  # the server is past its start once registered
        while "server 0 registered" not in (tmp_path / "scheduler.log").read_text():
            assert time.monotonic() < registered and job.server.poll() is None
            time.sleep(0.05)
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


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_half_open_connections_are_capped_logged_and_registration_goes_on(tmp_path):
    require_build()
    soft, hard, attackers = 256, 4096, 2000  # the cap is then 4096 / 4 = 1024
    # The server registers before the flood and waits for the cluster through all of it
    # (up to 30 s to start, 40 s of flood, 30 s to register): its rendezvous must outlast
    # that, or it gives up, leaves, and the worker below waits for a server that is gone.
    job = Job(tmp_path, env={"TFPS_TIMEOUT": "110"},
              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)))
    log_path = tmp_path / "scheduler.log"
    held, reopened, most = [], 0, 0

    def log():
        job.scheduler_log.flush()
        return log_path.read_text()

    try:
        deadline = time.monotonic() + 30
        while "server 0 registered" not in log():
            assert time.monotonic() < deadline and job.server.poll() is None
            time.sleep(0.05)
        pid = job.scheduler.pid
        cpu_before, wall_before = cpu_seconds(pid), time.monotonic()
        for _ in range(attackers):  # none of which ever says a word
            held.append(socket.create_connection(("127.0.0.1", job.scheduler_port), timeout=5))
        # Reopen each as it is closed, until the scheduler has said why it closes them and
        # has closed some of the reopened ones too (bounded: 40 s).
        deadline = time.monotonic() + 40
        while "connection(s) to tcp://127.0.0.1:" not in log() or reopened < attackers + 100:
            assert time.monotonic() < deadline, (reopened, log())
            most = max(most, open_descriptors(pid))
            poller = select.poll()
            for s in held:
                poller.register(s, select.POLLIN)
            by_fd = {s.fileno(): s for s in held}
            for fd, _ in poller.poll(200):  # end of stream: the scheduler closed it
                held.remove(by_fd[fd])
                by_fd[fd].close()
                held.append(socket.create_connection(("127.0.0.1", job.scheduler_port),
                                                     timeout=5))
                reopened += 1
        cpu = cpu_seconds(pid) - cpu_before
        print(f"scheduler: at most {most} descriptors, {cpu:.2f} s CPU in "
              f"{time.monotonic() - wall_before:.1f} s, {reopened} connections reopened")
        assert most < hard - 256, most  # descriptors left for the job's own use
        text = log()
        assert re.search(r"the scheduler closed \d+ connection\(s\) to tcp://127\.0\.0\.1:\d+ "
                         r"that sent nothing for 2 s while at least 1024 were open", text), text
        assert job.server.poll() is None, job.server_log_text()
        # A real member registers while the flood goes on.
        assert job.register_workers(1).startswith("127.0.0.1:")
        assert job.scheduler.poll() is None
    finally:
        for s in held:
            s.close()
        job.close()

"""A worker stopped by a signal, as tfps-run and the other workers report it (issue 11,
defect 8). Before, the others said only that a connection closed, and tfps-run could
blame the scheduler, whose exit (a consequence) it saw in the same sweep as the worker's.
Now a worker that SIGTERM stops tells the others so first, and tfps-run names a stopped
(SIGSTOP) worker as the cause. Real ps_server and core workers under tfps-run.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster import REPO, require_build

RUN_PY = REPO / "tf_ps_ops" / "run.py"
LOOP_WORKER = Path(__file__).resolve().parent / "core_workers" / "loop_worker.py"
pytestmark = pytest.mark.timeout(180)


def descendants(pid):
    """Every live process below `pid`, as {pid: parent pid}."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def worker_pid(launcher, rank):
    """The loop worker of `rank` that `launcher` started (never any other process)."""
    for pid in descendants(launcher.pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:
            continue
        if str(LOOP_WORKER).encode() in cmdline and f"TFPS_RANK={rank}".encode() in environ:
            return pid
    return None


def run_and_stop(tmp_path, sig, env):
    """tfps-run -np 3 of loop workers; once all stepped, `sig` to worker 1. Returns
    (exit code, stdout, stderr)."""
    require_build()
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        launcher = subprocess.Popen(
            [sys.executable, str(RUN_PY), "-np", "3", "--timeout", "120",
             sys.executable, str(LOOP_WORKER), "100000"],
            stdout=stdout, stderr=stderr, env={**os.environ, **env, "PYTHONPATH": str(REPO)})
    victim = None
    try:
        limit = time.monotonic() + 60
        while time.monotonic() < limit and out.read_text().count("step 3 ok") < 3:
            assert launcher.poll() is None, err.read_text()
            time.sleep(0.05)
        victim = worker_pid(launcher, 1)
        assert victim is not None, "worker 1 not found"
        os.kill(victim, sig)
        code = launcher.wait(timeout=90)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        if victim is not None:  # a stopped one must not outlive the test
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return code, out.read_text(), err.read_text()


def test_a_worker_stopped_by_sigterm_is_named_with_the_signal(tmp_path):
    code, out, err = run_and_stop(tmp_path, signal.SIGTERM, {"TFPS_TIMEOUT": "60"})
    assert code == 128 + signal.SIGTERM, err
    assert err.endswith("tfps-run: worker 1 was killed by signal 15 (SIGTERM); "
                        "stopped the others\n"), err
    for rank in (0, 2):
        lines = [line for line in err.splitlines() if line.startswith(f"[worker {rank}]")]
        assert any("worker 1 (127.0.0.1) failed: stopped by SIGTERM" in line
                   for line in lines), err


def test_a_worker_stopped_by_sigstop_is_named_by_tfps_run(tmp_path):
    code, out, err = run_and_stop(tmp_path, signal.SIGSTOP,
                                  {"TFPS_TIMEOUT": "60", "TFPS_HEARTBEAT_TIMEOUT": "2"})
    assert code != 0, err
    last = err.splitlines()[-1]
    assert last.startswith("tfps-run: worker 1 is stopped (SIGSTOP, Ctrl-Z or a debugger)"), err
    for rank in (0, 2):  # the others name it too (lost by heartbeat)
        lines = [line for line in err.splitlines() if line.startswith(f"[worker {rank}]")]
        assert any("worker 1" in line and "is gone" in line for line in lines), err
        # ... and stop at once: the local sum (hierarchical aggregation, on under tfps-run)
        # did not wait out TFPS_TIMEOUT for the stopped local worker.
        assert any("push_pull failed" in line and "the job cannot go on" in line
                   for line in lines), err
        assert not any("TFPS_TIMEOUT" in line for line in lines), err

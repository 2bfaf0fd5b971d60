"""`tfps-run --elastic -H` over real ssh (issues 11 and 13): two netns hosts with
throwaway sshds, as test_tfps_run_ssh.py; every role is started over ssh (the scheduler
on host 0, a server per host, workers in their slots). The epochs reach the remote
workers through their ssh sessions (each gets a folder of its own on its host, not the
driver's job directory), and their joins and acks come back the same way. A remote
worker SIGKILLs itself mid-job: its exit comes back through ssh, the survivors on both
hosts go on, and their parameters match a NumPy replay of the averaging divisors.
A lost host (its link down: ssh's keepalive ends the sessions) takes ~20 s.

Before: tfps-run refused --elastic with -H ("one host only").
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from test_tfps_run_ssh import (job_processes, ssh_hosts, tfps_run,  # noqa: F401
                               wait_for_no_job_processes)
from netns_support import AVAILABLE, WHY_NOT

REPO = Path(__file__).resolve().parents[2]
WORKERS = REPO / "tests" / "multiprocess" / "elastic_workers"
sys.path.insert(0, str(WORKERS))
from loop_gradient import LR, gradient  # noqa: E402

pytestmark = [pytest.mark.skipif(not AVAILABLE, reason=WHY_NOT), pytest.mark.timeout(180)]
ENV = {"TFPS_HEARTBEAT_TIMEOUT": "5", "TF_CPP_MIN_LOG_LEVEL": "2",
       "OMP_NUM_THREADS": "1"}


def replay(history):
    """NumPy: SGD on the mean gradient of the ids recorded for each step."""
    w = np.zeros(4)
    for step, ids in enumerate(history):
        w -= LR * np.mean([gradient(i, step) for i in ids], axis=0)
    return w


def test_a_sigkilled_remote_worker_the_others_go_on_over_ssh(ssh_hosts, tmp_path):  # noqa: F811
    hosts, ssh = ssh_hosts
    a0, a1 = hosts.address(0), hosts.address(1)
    kill_step = 3
    launcher = tfps_run(hosts, ssh, f"{a0}:1,{a1}:2", [
        "--elastic", sys.executable, WORKERS / "loop_worker.py", tmp_path, "6", "2", "w2",
        str(kill_step)], env=ENV)
    out, _ = launcher.communicate(timeout=170)
    assert launcher.returncode == 0, out[-6000:]
    # Its exit came back through ssh (the wrapper's 137), named as the signal, and host.
    assert (f"worker w2 (rank 2) was killed by signal 9 (SIGKILL) on {a1}; the job goes on "
            "with 2 worker(s)") in out, out[-6000:]
    assert "averages now divide by 2" in out, out[-6000:]
    assert f"[{a0}:scheduler]" in out and f"[{a1}:server 1]" in out, out[-6000:]
    assert "\x1e" not in out, out[-6000:]  # the relay lines never reach the output
    found = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("w*.json")}
    assert sorted(found) == ["w0", "w1"], out[-6000:]
    history = found["w0"]["history"]
    assert found["w1"]["history"] == history
    members = [tuple(h) for h in history]
    assert members[:kill_step] == [("w0", "w1", "w2")] * kill_step
    assert members[kill_step:] == [("w0", "w1")] * (len(members) - kill_step)
    assert len(members) >= 6
    assert found["w0"]["w"] == found["w1"]["w"]
    np.testing.assert_allclose(found["w0"]["w"], replay(history), rtol=1e-12)
    assert sorted((found[w]["rank"], found[w]["size"]) for w in found) == [(0, 2), (1, 2)]
    # Each remote worker read its epochs in a folder of its own (the hosts share this
    # file system, so the driver's directory would have been readable): gone after.
    folders = {found[w]["elastic_dir"] for w in found}
    assert len(folders) == 2 and all(Path(f).name.startswith("tfps-eworker-")
                                     for f in folders), folders
    assert not any(Path(f).exists() for f in folders), folders
    assert wait_for_no_job_processes(hosts, ssh, launcher.pid) == {0: set(), 1: set()}


def test_a_lost_host_its_workers_and_server_are_replaced_the_job_goes_on(  # noqa: F811
        ssh_hosts, tmp_path):
    """Host 1's link goes down mid-job: nothing there exits, its ssh sessions end by
    ssh's keepalive (255). The driver names the host lost, and the epochs after put the
    server it had on host 0; w0 goes on alone (the loop ends once a step had 1 worker)."""
    hosts, ssh = ssh_hosts
    a0, a1 = hosts.address(0), hosts.address(1)
    folders_before = set(Path(tempfile.gettempdir()).glob("tfps-eworker-*"))
    launcher = tfps_run(hosts, ssh, f"{a0}:1,{a1}:2", [
        "--elastic", sys.executable, WORKERS / "loop_worker.py", tmp_path, "6", "1", "-",
        "-1"], env=ENV)
    give_up = time.monotonic() + 90
    while len(list(tmp_path.glob("initing-*"))) < 3 and launcher.poll() is None:
        assert time.monotonic() < give_up, "the workers did not start"
        time.sleep(0.1)
    time.sleep(3.0)  # into the training loop, or still in the rendezvous: both are fine
    subprocess.run(["ip", "-n", hosts.bridge_ns, "link", "set", "v1", "down"], check=True,
                   timeout=30)
    out, _ = launcher.communicate(timeout=150)
    assert launcher.returncode == 0, out[-6000:]
    assert f"host {a1} is lost" in out, out[-6000:]
    assert "lost its ssh session" in out, out[-6000:]
    found = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("w*.json")}
    assert sorted(found) == ["w0"], out[-6000:]
    members = [tuple(h) for h in found["w0"]["history"]]
    k = members.index(("w0",))
    assert all(m == ("w0", "w1", "w2") for m in members[:k]), members
    assert members[k:] == [("w0",)] * (len(members) - k)
    np.testing.assert_allclose(found["w0"]["w"], replay(found["w0"]["history"]), rtol=1e-12)
    assert (found["w0"]["rank"], found["w0"]["size"]) == (0, 1)
    # Host 0 is left clean; host 1's processes are cut off (the fixture ends them).
    give_up = time.monotonic() + 15
    while (left := job_processes(hosts, ssh)[0] - {launcher.pid}) and \
            time.monotonic() < give_up:
        time.sleep(0.2)
    assert left == set(), left
    # Host 1's cut-off workers: SIGTERM, so that their wrappers remove their folders.
    for pid in job_processes(hosts, ssh)[1]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    while (left := job_processes(hosts, ssh)[1]) and time.monotonic() < give_up + 15:
        time.sleep(0.2)
    assert left == set(), left
    assert set(Path(tempfile.gettempdir()).glob("tfps-eworker-*")) <= folders_before

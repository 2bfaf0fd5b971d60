"""`tfps-run --host-discovery-script` with remote hosts over real ssh: two netns hosts with
throwaway sshds, as test_elastic_ssh.py; tfps-run runs inside host 0, and the discovery
script (a file the test rewrites) names the hosts by address, so that every worker is
started over ssh. A host added mid-training gets a worker that joins at a commit; the
host removed again loses it cleanly; the weights equal a NumPy replay of the members of
each step, bit for bit alike on every worker. A host removed below --min-np: the job
waits, then fails at --elastic-timeout naming what the script found, and no process is
left on either host. Prints the join and recovery times (run with -s to see them).

Before: the driver refused every host but this machine's ("only this machine's hosts").
"""

import json
import sys
import time
from pathlib import Path

import pytest

from test_tfps_run_ssh import ssh_hosts, tfps_run, wait_for_no_job_processes  # noqa: F401
from netns_support import AVAILABLE, WHY_NOT
from test_elastic_ssh import ENV, replay

import numpy as np

REPO = Path(__file__).resolve().parents[2]
WORKERS = REPO / "tests" / "multiprocess" / "elastic_workers"
pytestmark = [pytest.mark.skipif(not AVAILABLE, reason=WHY_NOT), pytest.mark.timeout(200)]


def discovery_script(tmp_path, hosts):
    hosts_file = tmp_path / "hosts.txt"
    hosts_file.write_text(hosts)
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat '{hosts_file}'\n")
    script.chmod(0o755)
    return script, hosts_file


def when_exists(path, launcher, timeout=120):
    give_up = time.monotonic() + timeout
    while not path.exists():
        assert launcher.poll() is None, f"the job ended before {path.name} appeared"
        assert time.monotonic() < give_up, f"no {path.name} after {timeout} s"
        time.sleep(0.05)


def first_step_after(steps, since, size):
    """The time of the first commit of `size` workers after `since` (steps.txt)."""
    return min(t for t, n in steps if t > since and n == size)


def test_a_discovered_remote_host_joins_and_leaves_over_ssh(ssh_hosts, tmp_path):  # noqa: F811
    """a0:2 at the start (-np 2, both workers over ssh to host 0); at w0's step 3 the
    script adds a1:1: w2 starts there and joins; once a step of 3 is committed the script
    drops a1: the driver stops w2, w0 and w1 go on."""
    hosts, ssh = ssh_hosts
    a0, a1 = hosts.address(0), hosts.address(1)
    script, hosts_file = discovery_script(tmp_path, f"{a0}:2\n")
    launcher = tfps_run(hosts, ssh, ["--host-discovery-script", str(script), "-np", "2",
                                     "--max-np", "3"], [
        sys.executable, WORKERS / "loop_worker.py", tmp_path, "8", "2", "-", "-1",
        "--mark", "w0:3", "--mark-sizes", "w0", "--size-runs", "2,3,2",
        "--step-sleep", "0.1"], env=ENV)
    when_exists(tmp_path / "mark-3", launcher)
    added = time.time()
    hosts_file.write_text(f"{a0}:2\n{a1}:1\n")
    when_exists(tmp_path / "size-3", launcher)
    removed = time.time()
    hosts_file.write_text(f"{a0}:2\n")
    out, _ = launcher.communicate(timeout=170)
    assert launcher.returncode == 0, out[-6000:]
    assert f"host discovery: {a0}:2, {a1}:1 (3 slot(s))" in out, out[-6000:]
    assert "started worker(s) w2 on new slot(s)" in out, out[-6000:]
    assert f"[{a1}:worker w2]" in out and f"[{a0}:worker w0]" in out, out[-6000:]
    assert f"stopping worker w2 (rank 2): host {a1} is gone from the discovery script's " \
           "output" in out, out[-6000:]
    assert "w3" not in out and "restart" not in out, out[-6000:]
    found = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("w*.json")}
    assert sorted(found) == ["w0", "w1"], out[-6000:]
    history = found["w0"]["history"]
    assert found["w1"]["history"] == history and found["w1"]["w"] == found["w0"]["w"]
    np.testing.assert_allclose(found["w0"]["w"], replay(history), rtol=1e-12)
    members = [tuple(h) for h in history]
    joined = members.index(("w0", "w1", "w2"))
    left = members.index(("w0", "w1"), joined)
    assert members == [("w0", "w1")] * joined + [("w0", "w1", "w2")] * (left - joined) + \
        [("w0", "w1")] * (len(members) - left), members
    steps = [(float(t), int(n)) for t, n in
             (line.split() for line in (tmp_path / "steps.txt").read_text().splitlines())]
    join_s = first_step_after(steps, added, 3) - added
    recovery_s = first_step_after(steps, removed, 2) - removed
    print(f"\njoin time (script adds a host -> first step of 3): {join_s:.2f} s; "
          f"recovery time (script drops it -> first step of 2): {recovery_s:.2f} s")
    assert wait_for_no_job_processes(hosts, ssh, launcher.pid) == {0: set(), 1: set()}


SLEEPING_WORKER = ("import os, sys, time\n"
                   "open(os.path.join(sys.argv[1], 'started-' + os.environ['TFPS_ELASTIC_ID']),"
                   " 'w').close()\n"
                   "time.sleep(120)\n")


def test_a_remote_host_removed_below_min_np_waits_then_fails(ssh_hosts, tmp_path):  # noqa: F811
    """No TensorFlow (the workers sleep): a0:1 and a1:1, -np 2, --elastic-timeout 4; the
    script drops a1: w1 is stopped over ssh, and the job fails 4 s later; nothing is
    left on either host."""
    hosts, ssh = ssh_hosts
    a0, a1 = hosts.address(0), hosts.address(1)
    worker = tmp_path / "worker.py"
    worker.write_text(SLEEPING_WORKER)
    script, hosts_file = discovery_script(tmp_path, f"{a0}:1\n{a1}:1\n")
    launcher = tfps_run(hosts, ssh, ["--host-discovery-script", str(script), "-np", "2",
                                     "--elastic-timeout", "4"],
                        [sys.executable, worker, tmp_path], env=ENV)
    when_exists(tmp_path / "started-w1", launcher, timeout=60)
    hosts_file.write_text(f"{a0}:1\n")
    out, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == 1, out[-6000:]
    assert f"stopping worker w1 (rank 1): host {a1} is gone from the discovery script's " \
           "output" in out, out[-6000:]
    assert "1 worker(s), fewer than --min-np 2: waiting up to 4 s (--elastic-timeout)" \
        in out, out[-6000:]
    assert out.rstrip().endswith(
        f"tfps-run: 1 worker(s) for 4 s (--elastic-timeout), fewer than --min-np 2; the host "
        f"discovery script found {a0}:1 (1 slot(s)); stopped the others"), out[-6000:]
    assert wait_for_no_job_processes(hosts, ssh, launcher.pid) == {0: set(), 1: set()}

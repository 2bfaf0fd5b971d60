"""Elastic jobs that grow and shrink with `tfps-run --host-discovery-script`
(docs/elastic.md): the script is a shell script printing a file the test rewrites in the
middle of the training. A new slot gets a worker that joins at a commit, a lost slot
stops one, and the weights equal a NumPy replay of the members of each step, bit for bit
alike on every worker. Too few slots wait, then fail clearly; a broken script fails at
once. Real ps_server, real TF workers (no TF where the test needs none).
"""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from cluster import REPO, require_build
from test_elastic import WORKERS, assert_replayed, results

sys.path.insert(0, str(WORKERS))
from loop_gradient import LR, gradient  # noqa: E402

RUN_PY = REPO / "tf_ps_ops" / "run.py"
pytestmark = pytest.mark.timeout(240)


def discovery_script(tmp_path, hosts):
    """A discovery script printing tmp_path/hosts.txt (and counting its runs)."""
    hosts_file = tmp_path / "hosts.txt"
    hosts_file.write_text(hosts)
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\necho run >> '{tmp_path}/runs'\ncat '{hosts_file}'\n")
    script.chmod(0o755)
    return script, hosts_file


def start(tmp_path, flags, worker, args, timeout=200, env=None):
    """tfps-run in the background, its output in tmp_path/log.txt."""
    require_build()
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("TFPS_", "DMLC_", "HOROVOD_"))}
    full_env.update({"PYTHONPATH": str(REPO), "TFPS_HEARTBEAT_TIMEOUT": "5",
                     "TF_CPP_MIN_LOG_LEVEL": "2"})
    full_env.update(env or {})
    log = open(tmp_path / "log.txt", "w")
    proc = subprocess.Popen(
        [sys.executable, str(RUN_PY), *flags, "--timeout", str(timeout),
         sys.executable, str(worker), *args],
        stdout=log, stderr=subprocess.STDOUT, env=full_env)
    log.close()
    return proc


def finish(tmp_path, proc, timeout=220):
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    return code, (tmp_path / "log.txt").read_text()


def when_exists(path, then, proc, timeout=120):
    """Waits for `path` (or the job's end), then calls `then()`."""
    give_up = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the job ended before {path.name} appeared"
        assert time.monotonic() < give_up, f"no {path.name} after {timeout} s"
        time.sleep(0.1)
    then()


def test_the_job_grows_up_to_max_np_and_shrinks_with_the_scripts_hosts(tmp_path):
    """localhost:2 at the start. At w0's step 3 the script says localhost:4, with --max-np
    3: one worker (w2) is started, joins at a commit and gets the state by the sync; no
    fourth. Once a step of 3 is committed, the script says localhost:2: the driver stops w2 (the
    highest rank), which is no failure and spends no restart; w0 and w1 redo the step it
    broke and finish. The weights equal a NumPy replay of the members of each step."""
    script, hosts = discovery_script(tmp_path, "localhost:2\n")
    proc = start(tmp_path, ["-np", "2", "--max-np", "3", "--host-discovery-script",
                            str(script)],
                 WORKERS / "loop_worker.py",
                 [str(tmp_path), "8", "2", "-", "-1", "--mark", "w0:3", "--mark-sizes", "w0",
                  "--size-runs", "2,3,2", "--step-sleep", "0.1"])
    when_exists(tmp_path / "mark-3", lambda: hosts.write_text("localhost:4\n"), proc)
    # Once a step of 3 is committed (not merely joined), the script drops a slot.
    when_exists(tmp_path / "size-3", lambda: hosts.write_text("localhost:2\n"), proc)
    code, log = finish(tmp_path, proc)
    assert code == 0, log[-6000:]
    assert "host discovery: localhost:4 (4 slot(s)) (was localhost:2 (2 slot(s)))" in log, \
        log[-6000:]
    assert "started worker(s) w2 on new slot(s); they join at the members' next commit" \
        in log, log[-6000:]
    assert "stopping worker w2 (rank 2): host localhost has 2 slot(s) now" in log, log[-6000:]
    assert "worker w2 (rank 2) was stopped by the driver: host localhost has 2 slot(s) now; " \
           "the job goes on with 2 worker(s)" in log, log[-6000:]
    assert "w3" not in log and "restart" not in log, log[-6000:]
    found = results(tmp_path)
    assert sorted(found) == ["w0", "w1"], log[-6000:]  # w2 was stopped before writing
    members = assert_replayed(found, log)
    joined = members.index(("w0", "w1", "w2"))
    left = members.index(("w0", "w1"), joined)
    assert joined >= 3, members
    assert members == [("w0", "w1")] * joined + [("w0", "w1", "w2")] * (left - joined) + \
        [("w0", "w1")] * (len(members) - left), members
    assert {found[w]["size"] for w in found} == {2}


STARTED_WORKER = ("import os, sys, time\n"
                  "open(os.path.join(sys.argv[1], 'started-' + os.environ['TFPS_ELASTIC_ID']),"
                  " 'w').close()\n"
                  "time.sleep(float(sys.argv[2]))\n")


def test_too_few_slots_at_the_start_wait_for_more(tmp_path):
    """No TensorFlow: the script finds 1 slot at its first run, fails at its second (a
    later failure is printed and retried), then finds 3; -np 3 waits for them and starts
    3 workers (which exit 0 at once: the job ends)."""
    worker = tmp_path / "worker.py"
    worker.write_text(STARTED_WORKER)
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\necho run >> '{tmp_path}/runs'\n"
                      f"runs=$(wc -l < '{tmp_path}/runs')\n"
                      "if [ $runs -eq 1 ]; then echo localhost:1; "
                      "elif [ $runs -eq 2 ]; then echo flaky >&2; exit 1; "
                      "else echo localhost; echo 127.0.0.1:2; fi\n")
    script.chmod(0o755)
    proc = start(tmp_path, ["-np", "3", "--host-discovery-script", str(script)], worker,
                 [str(tmp_path), "0"], timeout=60)
    code, log = finish(tmp_path, proc, timeout=80)
    assert code == 0, log[-6000:]
    assert "waiting for 3 slot(s) (--min-np/-np): the host discovery script found " \
           "localhost:1 (1 slot(s))" in log, log
    assert f"host discovery script '{script}' exited with code 1; its stderr: flaky; trying " \
           "again" in log, log
    assert sorted(p.name for p in tmp_path.glob("started-*")) == \
        ["started-w0", "started-w1", "started-w2"], log
    assert "elastic epoch 0: 3 worker(s) [w0, w1, w2]" in log, log


def test_too_few_slots_at_the_start_fail_at_the_elastic_timeout(tmp_path):
    """No TensorFlow: 1 slot, -np 3, --elastic-timeout 3: the script runs every second
    until the deadline, then the job fails naming what it found; no worker ran."""
    worker = tmp_path / "worker.py"
    worker.write_text(STARTED_WORKER)
    script, _ = discovery_script(tmp_path, "localhost:1\n")
    proc = start(tmp_path, ["-np", "3", "--elastic-timeout", "3", "--host-discovery-script",
                            str(script)], worker, [str(tmp_path), "0"], timeout=60)
    code, log = finish(tmp_path, proc, timeout=80)
    assert code == 1, log
    assert log.rstrip().endswith(
        "tfps-run: the host discovery script found localhost:1 (1 slot(s)) in 3 s "
        "(--elastic-timeout), fewer than the 3 worker(s) needed to start (--min-np/-np); "
        "no worker started"), log
    assert len((tmp_path / "runs").read_text().split()) >= 3, log
    assert not list(tmp_path.glob("started-*")), log


def test_fewer_than_min_np_while_running_fails_at_the_elastic_timeout(tmp_path):
    """No TensorFlow (the workers sleep): localhost:2, -np 2; the script drops to
    localhost:1: the driver stops w1, w0 goes on, and the job fails 3 s later
    (--elastic-timeout) as no slot came back."""
    worker = tmp_path / "worker.py"
    worker.write_text(STARTED_WORKER)
    script, hosts = discovery_script(tmp_path, "localhost:2\n")
    proc = start(tmp_path, ["-np", "2", "--elastic-timeout", "3", "--host-discovery-script",
                            str(script)], worker, [str(tmp_path), "60"], timeout=60)
    when_exists(tmp_path / "started-w1", lambda: hosts.write_text("localhost:1\n"), proc,
                timeout=30)
    code, log = finish(tmp_path, proc, timeout=80)
    assert code == 1, log
    assert "stopping worker w1 (rank 1): host localhost has 1 slot(s) now" in log, log
    assert "1 worker(s), fewer than --min-np 2: waiting up to 3 s (--elastic-timeout)" in log, \
        log
    assert log.rstrip().endswith(
        "tfps-run: 1 worker(s) for 3 s (--elastic-timeout), fewer than --min-np 2; the host "
        "discovery script found localhost:1 (1 slot(s)); stopped the others"), log


@pytest.mark.parametrize("restarts", [0, 1])
def test_a_worker_dying_on_its_own_spends_a_restart_for_its_slot(tmp_path, restarts):
    """No TensorFlow: w1 exits 5 at once, w0 sleeps 6 s and exits 0. With a restart left
    the slot gets a new worker (w2, which is stopped joining when w0 finishes); without,
    the slot stays empty, so that a crashing command does not restart for ever."""
    worker = tmp_path / "worker.py"
    worker.write_text(STARTED_WORKER.replace(
        "\n", "\nif os.environ['TFPS_ELASTIC_ID'] == 'w1': sys.exit(5)\n", 1))
    script, _ = discovery_script(tmp_path, "localhost:2\n")
    proc = start(tmp_path, ["-np", "2", "--min-np", "1", "--elastic-restarts", str(restarts),
                            "--host-discovery-script", str(script)], worker,
                 [str(tmp_path), "6"], timeout=60)
    code, log = finish(tmp_path, proc, timeout=80)
    assert code == 0, log
    assert "worker w1 (rank 1) exited with code 5; the job goes on with 1 worker(s)" in log, log
    started = sorted(p.name for p in tmp_path.glob("started-*"))
    if restarts:
        assert "worker w1's slot gets a new worker (0 restart(s) left)" in log, log
        assert "started worker(s) w2 on new slot(s)" in log, log
        assert "stopped joining worker w2: the job finished before it joined" in log, log
        assert started == ["started-w0", "started-w2"], log
    else:
        assert "worker w1's slot stays empty: no restart left (--elastic-restarts); the job " \
               "now has at most 1 worker(s)" in log, log
        assert "w2" not in log and started == ["started-w0"], log


@pytest.mark.parametrize("body,message", [
    ("echo localhost:two", "output line 1 'localhost:two': slots must be a whole number "
                           "(`host:slots`); no worker started"),
    ("echo 'localhost:1 extra'", "output line 1 'localhost:1 extra': slots must be a whole "
                                 "number"),
    ("echo 'no cloud credentials' >&2; exit 3",
     "exited with code 3; its stderr: no cloud credentials; no worker started"),
])
def test_a_broken_script_fails_the_job_at_once(tmp_path, body, message):
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    worker = tmp_path / "worker.py"
    worker.write_text(STARTED_WORKER)
    proc = start(tmp_path, ["-np", "1", "--host-discovery-script", str(script)], worker,
                 [str(tmp_path), "0"], timeout=30)
    code, log = finish(tmp_path, proc, timeout=40)
    assert code == 1, log
    assert f"tfps-run: host discovery script '{script}'" in log, log
    assert message in log, log
    assert not list(tmp_path.glob("started-*")), log


def replay_momentum(history, momentum, reset_at=()):
    """NumPy: momentum SGD (TF's ResourceApplyMomentum) on the mean gradient of the ids of
    each step; the accumulator restarts at the steps in `reset_at`."""
    w, accum = np.zeros(4), np.zeros(4)
    for step, ids in enumerate(history):
        if step in reset_at:
            accum = np.zeros(4)
        accum = momentum * accum + np.mean([gradient(i, step) for i in ids], axis=0)
        w -= LR * accum
    return w


def test_ps_mode_keeps_the_optimizer_slots_across_a_grow_and_a_shrink(tmp_path):
    """PS mode, momentum 0.9 on the servers: the job grows from 2 to 3 workers (a join at
    a commit) and shrinks back (a stopped worker: the others restore their last commit).
    Each change brings new servers; the momentum slot of the last commit goes with the
    parameters (read at every commit, pushed by rank 0), so the weights equal a NumPy
    replay whose accumulator runs through the changes, and not one that restarts it."""
    script, hosts = discovery_script(tmp_path, "localhost:2\n")
    proc = start(tmp_path, ["-np", "2", "--max-np", "3", "--host-discovery-script",
                            str(script)],
                 WORKERS / "loop_worker.py",
                 [str(tmp_path), "8", "2", "-", "-1", "--ps", "--momentum", "0.9",
                  "--mark", "w0:3", "--mark-sizes", "w0", "--size-runs", "2,3,2",
                  "--step-sleep", "0.1"])
    when_exists(tmp_path / "mark-3", lambda: hosts.write_text("localhost:3\n"), proc)
    when_exists(tmp_path / "size-3", lambda: hosts.write_text("localhost:2\n"), proc)
    code, log = finish(tmp_path, proc)
    assert code == 0, log[-6000:]
    assert "PS mode: pushed 1 parameter(s) of the last commit to the new servers (and the " \
           "optimizer slots of 1)" in log, log[-6000:]
    found = results(tmp_path)
    assert sorted(found) == ["w0", "w1"], log[-6000:]
    history = found["w0"]["history"]
    assert found["w1"]["history"] == history and found["w1"]["w"] == found["w0"]["w"]
    members = [tuple(h) for h in history]
    joined = members.index(("w0", "w1", "w2"))
    left = members.index(("w0", "w1"), joined)
    np.testing.assert_allclose(found["w0"]["w"], replay_momentum(history, 0.9), rtol=1e-12)
    reset = replay_momentum(history, 0.9, reset_at=(joined, left))
    assert np.abs(reset - np.array(found["w0"]["w"])).max() > 1e-3  # the oracle can tell

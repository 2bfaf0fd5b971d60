"""Elastic membership under `tfps-run --elastic` (docs/elastic.md): a SIGKILLed worker
does not end the job; the survivors redo the failed step among themselves and their
parameters match a NumPy replay of the documented semantics; a restarted worker joins at
a commit and ends with the others' parameters. Real ps_server, real TF workers.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cluster import REPO, require_build

RUN_PY = REPO / "tf_ps_ops" / "run.py"
WORKERS = Path(__file__).resolve().parent / "elastic_workers"
pytestmark = pytest.mark.timeout(240)

sys.path.insert(0, str(WORKERS))
from loop_gradient import LR, gradient  # noqa: E402


def tfps_run(tmp_path, flags, worker, args, timeout=180, env=None):
    require_build()
    extra = env or {}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TFPS_", "DMLC_", "HOROVOD_"))}
    env.update({"PYTHONPATH": str(REPO), "TFPS_HEARTBEAT_TIMEOUT": "5",
                "TF_CPP_MIN_LOG_LEVEL": "2"})
    env.update(extra)
    return subprocess.run(
        [sys.executable, str(RUN_PY), *flags, "--timeout", str(timeout - 20),
         sys.executable, str(worker), *args],
        capture_output=True, text=True, timeout=timeout, env=env)


def replay(history):
    """NumPy: SGD on the mean gradient of the ids recorded for each step."""
    w = np.zeros(4)
    for step, ids in enumerate(history):
        w -= LR * np.mean([gradient(i, step) for i in ids], axis=0)
    return w


def results(out_dir):
    return {p.stem: json.loads(p.read_text()) for p in Path(out_dir).glob("*.json")}


def test_sigkilled_worker_the_others_go_on_and_a_restart_joins(tmp_path):
    """3 workers, 2 servers; w2 SIGKILLs itself at step 4, a new worker (w3) is started in
    its place and joins at a commit. One job checks both halves of the semantics."""
    kill_step = 4
    done = tfps_run(tmp_path, ["-np", "3", "-ns", "2", "--elastic", "--elastic-restarts", "1"],
                    WORKERS / "loop_worker.py", [str(tmp_path), "8", "3", "w2", str(kill_step)])
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-6000:]
    assert "worker w2 (rank 2) was killed by signal 9 (SIGKILL); the job goes on with 2" in log, \
        log[-6000:]
    assert "averages now divide by 2" in log, log[-6000:]
    assert "join at the members' next commit" in log, log[-6000:]
    found = results(tmp_path)
    assert sorted(found) == ["w0", "w1", "w3"], log[-6000:]
    history = found["w0"]["history"]
    assert found["w1"]["history"] == history == found["w3"]["history"]
    members = [tuple(h) for h in history]
    # Steps before the kill averaged over 3; the step the kill broke is redone over 2,
    # and so is every step until the newcomer joined; from then on over 3 again.
    assert members[:kill_step] == [("w0", "w1", "w2")] * kill_step
    joined = members.index(("w0", "w1", "w3"))
    assert joined > kill_step
    assert members[kill_step:joined] == [("w0", "w1")] * (joined - kill_step)
    assert members[joined:] == [("w0", "w1", "w3")] * (len(members) - joined)
    # The same sums everywhere, bit for bit; the newcomer got the parameters by the sync.
    assert found["w0"]["w"] == found["w1"]["w"] == found["w3"]["w"]
    np.testing.assert_allclose(found["w0"]["w"], replay(history), rtol=1e-12)
    assert sorted((found[w]["rank"], w) for w in found) == [(0, "w0"), (1, "w1"), (2, "w3")]
    assert {found[w]["size"] for w in found} == {3}


def test_keras_fit_resumes_from_the_last_commit(tmp_path):
    epochs, steps = 3, 4  # keras_worker.EPOCHS, STEPS
    done = tfps_run(tmp_path, ["-np", "3", "--elastic"], WORKERS / "keras_worker.py",
                    [str(tmp_path), "w2", "1", "2"])
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-6000:]
    found = results(tmp_path)
    assert sorted(found) == ["w0", "w1"], log[-6000:]
    every = [[e, b] for e in range(epochs) for b in range(steps)]
    broken = every.index([1, 2])
    for worker in ("w0", "w1"):
        # Each position once, but the batch the kill broke: begun, failed, and after
        # restoring the commit of the batch before it, begun again.
        assert found[worker]["started"] == every[:broken + 1] + every[broken:], worker
        assert (found[worker]["epoch"], found[worker]["batch"]) == (epochs, 0)
        assert found[worker]["size"] == 2
    assert found["w0"]["weights"] == found["w1"]["weights"]


def test_fewer_than_min_workers_ends_the_job_naming_the_lost_one(tmp_path):
    """No TensorFlow: worker w1 exits 5 at once, the others would wait; with
    --elastic-min-workers 3 the driver ends the job at once, naming w1."""
    script = ("import os, sys, time\n"
              "if os.environ['TFPS_ELASTIC_ID'] == 'w1': sys.exit(5)\n"
              "time.sleep(60)\n")
    worker = tmp_path / "worker.py"
    worker.write_text(script)
    done = tfps_run(tmp_path, ["-np", "3", "--elastic", "--elastic-min-workers", "3"],
                    worker, [], timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert ("worker w1 (rank 1) exited with code 5; 2 left, fewer than --elastic-min-workers 3"
            in done.stderr), done.stdout + done.stderr


def assert_replayed(found, log):
    """Every worker ends with the same vector, bit for bit, equal to a NumPy replay of the
    members each step was averaged over; returns the members per step."""
    workers = sorted(found)
    history = found[workers[0]]["history"]
    for worker in workers:
        assert found[worker]["history"] == history, (worker, log[-6000:])
        assert found[worker]["w"] == found[workers[0]]["w"], (worker, log[-6000:])
    np.testing.assert_allclose(found[workers[0]]["w"], replay(history), rtol=1e-12)
    return [tuple(h) for h in history]


def test_ps_mode_survives_a_lost_worker_a_lost_server_and_takes_in_a_newcomer(tmp_path):
    """PS mode (the servers run SGD on the mean gradient): 3 workers, 2 servers; w2
    SIGKILLs itself at step 2, w3 is started in its place and joins at a commit, and w0
    SIGKILLs a server at step 5 (before or after the join). Each epoch's new servers get
    the parameters of the last commit from the workers (tf_ps_ops.elastic ->
    ps_mode.push_served_variables; the newcomer pushes at the same point instead of its
    own initialize_variables); the weights equal a NumPy replay of the divisors, bit for
    bit alike on every worker. On main the new servers hold nothing and the first update
    fails ('never initialised on this server')."""
    done = tfps_run(tmp_path, ["-np", "3", "-ns", "2", "--elastic", "--elastic-restarts", "1"],
                    WORKERS / "loop_worker.py",
                    [str(tmp_path), "8", "3", "w2", "2", "--ps", "--kill-server", "w0:5"])
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-6000:]
    assert "worker w2 (rank 2) was killed by signal 9 (SIGKILL); the job goes on with 2" in log, \
        log[-6000:]
    assert "was killed by signal 9 (SIGKILL); the job goes on with new servers" in log, \
        log[-6000:]
    assert "[worker w3] tf_ps_ops.elastic: rank 2: PS mode: pushed 1 parameter(s) of the " \
           "last commit to the new servers" in log, log[-6000:]
    found = results(tmp_path)
    assert sorted(found) == ["w0", "w1", "w3"], log[-6000:]
    members = assert_replayed(found, log)
    joined = members.index(("w0", "w1", "w3"))
    assert members == [("w0", "w1", "w2")] * 2 + [("w0", "w1")] * (joined - 2) + \
        [("w0", "w1", "w3")] * (len(members) - joined), members
    assert joined > 2 and len(members) >= 8


def test_a_lost_server_with_no_restart_left_ends_the_job_naming_it(tmp_path):
    """No TensorFlow: w0 SIGKILLs a server of epoch 0; with --elastic-server-restarts 0 the
    driver ends the job at once, naming the server and the spent budget."""
    done = tfps_run(tmp_path, ["-np", "2", "-ns", "2", "--elastic",
                               "--elastic-server-restarts", "0"],
                    WORKERS / "kill_server.py", [], timeout=60)
    log = done.stdout + done.stderr
    assert done.returncode == 1, log[-6000:]
    assert "of elastic epoch 0 was killed by signal 9 (SIGKILL); no server restart left " \
           "(--elastic-server-restarts 0 spent); stopped the others" in done.stderr, log[-6000:]
    assert "a new epoch" not in log, log[-6000:]



def test_a_death_in_the_rendezvous_a_lost_server_and_a_stopped_worker(tmp_path):
    """Three losses in one job (each test costs a TensorFlow start-up), summation mode,
    3 workers, 2 servers:
    1. w2 SIGKILLs itself while w0 and w1 wait for it in epoch 0's rendezvous: the driver
       abandons epoch 0 (its scheduler refuses them) and they join epoch 1 at once
       (on main: they wait TFPS_TIMEOUT in init() and the job fails);
    2. w0 SIGKILLs a server at step 2: epoch 2 has new servers and the same workers, who
       restore their last commit and redo the step (on main: 'servers are not elastic');
    3. w1 SIGSTOPs itself at step 4: the driver kills it after TFPS_HEARTBEAT_TIMEOUT and
       w0 goes on alone in epoch 3 (on main: nobody kills it, the job fails).
    The vector equals a NumPy replay of the members of each step."""
    done = tfps_run(tmp_path, ["-np", "3", "-ns", "2", "--elastic"],
                    WORKERS / "loop_worker.py",
                    [str(tmp_path), "6", "1", "-", "-1", "--die-in-rendezvous", "w2",
                     "--workers", "3", "--kill-server", "w0:2", "--stop", "w1:4"],
                    env={"TFPS_TIMEOUT": "40", "TFPS_HEARTBEAT_TIMEOUT": "3"}, timeout=120)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-6000:]
    assert "elastic epoch 0 is abandoned before its rendezvous completed" in log, log[-6000:]
    assert "the rendezvous of epoch 0 was abandoned" in log, log[-6000:]
    assert "of elastic epoch 1 was killed by signal 9 (SIGKILL); the job goes on with new " \
           "servers and the same 2 worker(s), from their last commit (2 server restart(s) " \
           "left)" in log, log[-6000:]
    assert "elastic epoch 2: 2 worker(s) [w0, w1]" in log, log[-6000:]
    assert "worker w1 (rank 1) has been stopped (SIGSTOP, Ctrl-Z or a debugger) for" in log, \
        log[-6000:]
    assert "worker w1 (rank 1) was killed by signal 9 (SIGKILL); the job goes on with 1" in log, \
        log[-6000:]
    assert "elastic epoch 3: 1 worker(s) [w0]" in log, log[-6000:]
    found = results(tmp_path)
    assert sorted(found) == ["w0"], log[-6000:]
    members = assert_replayed(found, log)
    assert members == [("w0", "w1")] * 4 + [("w0",)] * 2


def test_a_stopped_server_is_killed_and_replaced(tmp_path):
    """No TensorFlow: w0 SIGSTOPs a server of epoch 0. The driver kills it after
    TFPS_HEARTBEAT_TIMEOUT (1 s here) and starts epoch 1 with new servers for the same
    workers, which exit 0 once they see it (on main the stopped server stays, and the
    workers wait for an epoch that never comes)."""
    done = tfps_run(tmp_path, ["-np", "2", "-ns", "2", "--elastic"],
                    WORKERS / "kill_server.py", ["stop"], timeout=60,
                    env={"TFPS_HEARTBEAT_TIMEOUT": "1"})
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-6000:]
    assert "of elastic epoch 0 has been stopped (SIGSTOP, Ctrl-Z or a debugger) for" in log, \
        log[-6000:]
    assert "of elastic epoch 0 was killed by signal 9 (SIGKILL); the job goes on with new " \
           "servers and the same 2 worker(s)" in log, log[-6000:]
    assert "elastic epoch 1: 2 worker(s) [w0, w1]" in log, log[-6000:]
    assert log.count("a new epoch") == 2, log[-6000:]

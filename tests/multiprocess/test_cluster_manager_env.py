"""A job started the way a cluster manager starts one, without tfps-run: every task gets
only TF_CONFIG (Kubeflow's TFJob) or Slurm's srun variables, ps tasks run
`python -m tf_ps_ops.role` (ps task 0: scheduler and server), workers run a script whose
`tf_ps_ops.init()` reads the same variables; push_pulls are checked against NumPy.
"""

import json
import os
import socket
import sys
import time
from pathlib import Path

import pytest

from cluster import REPO, require_build
from tf_ps_ops.runner.env import without_cluster_variables
from tf_ps_ops.runner.job import Job
from tf_ps_ops.runner.process import LogFiles

WORKER = Path(__file__).parent / "workers" / "env_place_worker.py"
pytestmark = pytest.mark.timeout(180)


def free_ports(n):
    """n ports free right now on loopback (the job binds them a moment later)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def run_tasks(tmp_path, tasks, timeout=120):
    """Starts each (role, index, argv, extra_env); waits; returns the job's results.
    Every process's exit code and output are checked by the caller."""
    base = without_cluster_variables(os.environ)
    base = {k: v for k, v in base.items() if not k.startswith(("SLURM_", "OMPI_", "PMI_"))}
    base.pop("TF_CONFIG", None)
    # One host: nothing needs to listen beyond loopback (and keyless roles may not).
    base.update(PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2", TFPS_TIMEOUT="60",
                TFPS_BIND="127.0.0.1")
    job = Job(None, 0, 0, LogFiles(tmp_path), cwd=REPO)
    try:
        processes = [job.spawn(role, index, argv, {**base, **env})
                     for role, index, argv, env in tasks]
        job.wait(processes, time.monotonic() + timeout)
        return [p.result() for p in processes]
    finally:
        job.teardown()


def check(results, size, num_servers):
    failed = [r for r in results if not r.ok]
    assert not failed, "\n".join(r.describe() for r in failed)
    oks = sorted(r.stdout.split()[1:] for r in results if r.role == "worker")
    assert oks == [[str(rank), str(size), str(num_servers)] for rank in range(size)]


ROLE = [sys.executable, "-m", "tf_ps_ops.role"]


def test_tf_config_job_without_the_launcher(tmp_path):
    require_build()
    ps0, ps1, chief, worker = (f"127.0.0.1:{p}" for p in free_ports(4))
    cluster = {"ps": [ps0, ps1], "chief": [chief], "worker": [worker]}

    def env(task_type, index):
        return {"TF_CONFIG": json.dumps({"cluster": cluster,
                                         "task": {"type": task_type, "index": index}})}
    results = run_tasks(tmp_path, [
        ("ps", 0, ROLE, env("ps", 0)), ("ps", 1, ROLE, env("ps", 1)),
        ("worker", 0, ROLE + ["--", sys.executable, WORKER], env("chief", 0)),
        ("worker", 1, [sys.executable, WORKER], env("worker", 0))])
    check(results, size=2, num_servers=2)
    assert "makes this task ps 0: scheduler:" in results[0].stderr


def test_slurm_job_without_the_launcher(tmp_path):
    require_build()
    port_base = free_ports(1)[0]
    # Every task runs the same line, as `srun -n 3 python -m tf_ps_ops.role -- ...` does.
    command = ROLE + ["--", sys.executable, WORKER]
    step = {"SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_NODELIST": "127.0.0.1",
            "SLURM_STEP_TASKS_PER_NODE": "3", "TFPS_SCHEDULER_PORT": str(port_base)}
    results = run_tasks(tmp_path, [
        ("ps" if procid == 0 else "worker", max(procid - 1, 0), command,
         {**step, "SLURM_PROCID": str(procid), "PMI_RANK": str(procid)})
        for procid in range(3)])
    check(results, size=2, num_servers=1)

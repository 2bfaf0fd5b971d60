"""A TF_CONFIG job across two netns hosts without any launcher: ps task i and one worker
on host i, each started with only TF_CONFIG (ps tasks under `python -m tf_ps_ops.role`,
ps task 0 also running the scheduler at its port + 1). The workers' push_pulls are checked
against NumPy; what the scheduler tells them must be the hosts' addresses, not loopback,
or host 1 could not reach server 0. Then a SIGTERM to ps task 0's helper stops its
scheduler and server. Needs root and `ip netns` (skipped otherwise). ~20-40 s.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from netns_support import AVAILABLE, WHY_NOT, namespaces, require_build  # noqa: E402
from netns import Hosts  # noqa: E402
from ps_cluster import netns_host  # noqa: E402
from tf_ps_ops.runner.env import without_cluster_variables  # noqa: E402
from tf_ps_ops.runner.job import Job  # noqa: E402
from tf_ps_ops.runner.process import LogFiles  # noqa: E402

WORKER = REPO / "tests" / "multiprocess" / "workers" / "env_place_worker.py"
ROLE = [sys.executable, "-m", "tf_ps_ops.role"]
pytestmark = [pytest.mark.skipif(not AVAILABLE, reason=WHY_NOT), pytest.mark.timeout(240)]


def test_tf_config_job_across_two_hosts(tmp_path):
    require_build("_tf_ps_ops*.so")
    with Hosts(2, rate="1gbit") as hosts:
        names = set(hosts.names + [hosts.bridge_ns])
        a0, a1 = hosts.address(0), hosts.address(1)
        cluster = {"ps": [f"{a0}:7000", f"{a1}:7000"], "chief": [f"{a0}:7100"],
                   "worker": [f"{a1}:7100"]}
        base = {k: v for k, v in without_cluster_variables(os.environ).items()
                if not k.startswith(("SLURM_", "OMPI_", "PMI_", "TF_CONFIG"))}
        # Emulated hosts that reach nothing but each other: a trusted network.
        base.update(PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2", TFPS_TIMEOUT="60",
                    OPENBLAS_NUM_THREADS="1", TFPS_INSECURE="1")

        def env(task_type, index):
            return {**base, "TF_CONFIG": json.dumps(
                {"cluster": cluster, "task": {"type": task_type, "index": index}})}
        job = Job(None, 0, 0, LogFiles(tmp_path), cwd=REPO)
        try:
            on = [netns_host(hosts, i) for i in range(2)]
            tasks = [job.spawn("ps", 0, ROLE, env("ps", 0), on[0]),
                     job.spawn("ps", 1, ROLE, env("ps", 1), on[1]),
                     job.spawn("worker", 0, [sys.executable, WORKER], env("chief", 0), on[0]),
                     job.spawn("worker", 1, [sys.executable, WORKER], env("worker", 0), on[1])]
            job.wait(tasks, time.monotonic() + 180)
            results = [t.result() for t in tasks]
        finally:
            job.teardown()
        failed = [r for r in results if not r.ok]
        assert not failed, "\n".join(r.describe() for r in failed)
        assert sorted(r.stdout.split()[1] for r in results[2:]) == ["0", "1"]
        scheduler_log = results[0].stderr
        # Server ids follow registration order, not ps task indices: either host may be 0.
        for address in (a0, a1):
            assert f"registered from {address}:7000" in scheduler_log, scheduler_log[-3000:]
    assert not names & namespaces()


def test_sigterm_to_ps_task_0_stops_its_scheduler_and_server(tmp_path):
    require_build("_tf_ps_ops*.so")
    cluster = {"ps": ["127.0.0.1:7200"], "worker": ["127.0.0.1:7300"]}
    env = {k: v for k, v in without_cluster_variables(os.environ).items()
           if not k.startswith(("SLURM_", "OMPI_", "PMI_", "TF_CONFIG"))}
    env.update(PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2", TFPS_INSECURE="1",
               TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "ps", "index": 0}}))
    with Hosts(1) as hosts:  # its own network stack: the fixed ports cannot collide
        job = Job(None, 0, 0, LogFiles(tmp_path), cwd=REPO)
        try:
            helper = job.spawn("ps", 0, ROLE, env, netns_host(hosts, 0))
            give_up = time.monotonic() + 60
            while "server 0 registered from" not in (tmp_path / "ps0.err").read_text():
                assert helper.poll() is None and time.monotonic() < give_up, \
                    helper.result().describe()
                time.sleep(0.1)
            assert len(hosts.pids(hosts.netns(0))) == 3  # helper, scheduler, server
            # The helper re-executed itself without TensorFlow (which it imported to read
            # TF_CONFIG) before supervising for the job's lifetime.
            status = Path(f"/proc/{helper.pid}/status").read_text()
            assert int(status.split("VmRSS:")[1].split()[0]) < 150_000, status
            os.kill(helper.pid, signal.SIGTERM)
            job.wait([helper], time.monotonic() + 30)
            assert helper.returncode == 128 + signal.SIGTERM, helper.result().describe()
            assert "terminated; stopped all processes" in helper.result().stderr
            assert hosts.pids(hosts.netns(0)) == []
        finally:
            job.teardown()

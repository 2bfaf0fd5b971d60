"""Slow is not dead: a wait on workers that are alive does not fail by default; every
member logs a stall warning every TFPS_STALL_WARNING naming the tensor, the ranks that
submitted it, those missing and the seconds waited; TFPS_STALL_SHUTDOWN ends the job for
it; a dead worker still ends the job at once (workers/stall_worker.py, a 2-worker Keras fit
whose rank 0 sleeps in a callback between epochs).

The clock is shortened: TFPS_TIMEOUT=5 and a 12 s sleep (longer than it) stand for the
default 120 s and a 150 s rank-0-only evaluation; TFPS_STALL_WARNING=2 for its 60 s.
TFPS_TIMEOUT still bounds the rendezvous, which must not include the workers' import of
TensorFlow (20 s on a loaded machine): the server starts, and the workers call init(), once
every worker is ready (workers/gated_ps_server.sh)."""

import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from cluster import PS_SERVER, Cluster, require_build

sys.path.insert(0, str(Path(__file__).parent / "workers"))
from stall_worker import oracle  # noqa: E402

WORKER = Path(__file__).parent / "workers" / "stall_worker.py"
GATED_PS_SERVER = Path(__file__).parent / "workers" / "gated_ps_server.sh"
SLEEP_S = 12
SHORT = {"TFPS_TIMEOUT": "5", "TFPS_STALL_WARNING": "2"}
# "stall warning: tensor 'NAME' (server 0, step S, partition P)... has waited N s:
# submitted by rank(s) 1; missing rank(s) 0": what every worker logs (the server's line
# names the tensor by its key, which each worker replaces by the name).
NAMED = re.compile(r"stall warning: tensor '[^']+' \(server 0, step \d+, partition \d+\).* "
                   r"has waited \d+ s: submitted by rank\(s\) 1; missing rank\(s\) 0,")
KEYED = re.compile(r"stall warning: tensor 0x[0-9a-f]{16} \(server 0, step \d+, partition "
                   r"\d+\).* has waited \d+ s: submitted by rank\(s\) 1; missing rank\(s\) 0,")


@pytest.fixture
def start_job(tmp_path):
    """Returns `start(env, sleep_s) -> Cluster`: 2 workers (stall_worker.py, its output in
    tmp_path) and 1 server, the rendezvous gated as the module says."""
    require_build()
    clusters = []

    def start(env, sleep_s, sleeper=0):
        go = tmp_path / "go"
        cluster = Cluster(tmp_path / "cluster", 2, 1, timeout=150,
                          env={**env, "TFPS_TEST_GO": str(go),
                               "TFPS_TEST_PS_SERVER": str(PS_SERVER)})
        cluster.ps_server = GATED_PS_SERVER
        clusters.append(cluster)
        cluster.start([sys.executable, str(WORKER), str(sleep_s), str(tmp_path), str(sleeper)])
        limit = time.monotonic() + 120
        while not all((tmp_path / f"ready{rank}").exists() for rank in range(2)):
            assert time.monotonic() < limit, cluster.result("worker", 0).describe()
            for rank in range(2):
                assert cluster.result("worker", rank).returncode is None, \
                    cluster.result("worker", rank).describe()
            time.sleep(0.05)
        go.touch()
        return cluster

    yield start
    for cluster in clusters:
        cluster.close()


def test_a_rank_slower_than_tfps_timeout_only_warns_and_the_job_completes(start_job,
                                                                          tmp_path):
    cluster = start_job(SHORT, SLEEP_S)
    cluster.wait()
    cluster.assert_ok()
    kernel, bias = oracle()
    for rank in range(2):
        result = cluster.result("worker", rank)
        assert "trained" in result.stdout, result.describe()
        assert NAMED.search(result.stderr), result.describe()
        # The metric counts the warnings this worker logged (docs/metrics.md).
        stalls = int(re.search(r"^stalls (-?\d+)$", result.stdout, re.M).group(1))
        assert 1 <= stalls <= result.stderr.count("stall warning"), result.describe()
        trained = np.load(tmp_path / f"rank{rank}.npz")
        np.testing.assert_allclose(trained["kernel"], kernel, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(trained["bias"], bias, rtol=1e-5, atol=1e-6)
    server = cluster.result("server", 0).stderr
    assert KEYED.search(server), server[-3000:]
    # A warning every 2 s while rank 0 slept 12 s: several, not one per partition per tick.
    assert 3 <= len(KEYED.findall(server)) <= SLEEP_S, server[-3000:]
    assert "TFPS_TIMEOUT" not in server and "timed out" not in server, server[-3000:]


def test_tfps_stall_shutdown_ends_the_job_naming_the_missing_rank(start_job):
    cluster = start_job({**SHORT, "TFPS_STALL_SHUTDOWN": "4"}, SLEEP_S)
    cluster.wait()
    waiting = cluster.result("worker", 1)
    assert waiting.returncode == 3, waiting.describe()
    assert "training failed" in waiting.stderr, waiting.describe()
    assert re.search(r"push_pull of tensor '[^']+' \(call \d+ on rank 1\): stalled for 4 s "
                     r"\(TFPS_STALL_SHUTDOWN\): tensor .* was submitted by rank\(s\) 1 but not "
                     r"by rank\(s\) 0, which are alive", waiting.stderr), waiting.describe()
    # Rank 0 comes back to a job without rank 1: it fails too, naming it gone.
    sleeper = cluster.result("worker", 0)
    assert sleeper.returncode == 3, sleeper.describe()
    assert "trained" not in sleeper.stdout


def test_a_killed_worker_still_ends_the_job_at_once(start_job):
    # No TFPS_STALL_SHUTDOWN, and rank 0 would sleep for minutes: only its death (its
    # closed connection) can end rank 1's wait.
    cluster = start_job({**SHORT, "TFPS_STALL_WARNING": "1"}, 600)
    cluster.wait_for_output("worker", 0, "sleeping", timeout=120)
    cluster.wait_for_output("worker", 1, "stall warning", timeout=60)  # rank 1 waits on it
    cluster.kill("worker", 0)
    killed_at = time.monotonic()
    # Measured to the error on rank 1 (its exit then waits for TensorFlow's teardown).
    while "training failed" not in cluster.result("worker", 1).stderr:
        assert time.monotonic() - killed_at < 60, cluster.result("worker", 1).describe()
        time.sleep(0.02)
    elapsed = time.monotonic() - killed_at
    print(f"rank 1 failed {elapsed:.2f} s after rank 0 was SIGKILLed")
    result = cluster.wait_for("worker", 1, timeout=60)
    assert result.returncode == 3, result.describe()
    assert re.search(r"worker 0 .*(gone|closed|died|disconnected)", result.stderr), \
        result.describe()
    # From the closed connection, not from a deadline (none is left to expire).
    assert elapsed < 5, result.describe()


def test_under_hierarchical_aggregation_the_local_wait_only_warns_too(start_job, tmp_path):
    # One host: rank 1 hands its gradients to its local leader, rank 0, through shared
    # memory and waits there while rank 0 sleeps.
    cluster = start_job({**SHORT, "TFPS_HIERARCHICAL": "1"}, SLEEP_S)
    cluster.wait()
    cluster.assert_ok()
    kernel, bias = oracle()
    for rank in range(2):
        trained = np.load(tmp_path / f"rank{rank}.npz")
        np.testing.assert_allclose(trained["kernel"], kernel, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(trained["bias"], bias, rtol=1e-5, atol=1e-6)
    member = cluster.result("worker", 1)
    assert re.search(r"stall warning: tensor '[^']+' \(step \d+\) on local rank 1 \(rank 1\) "
                     r"of 2 \(hierarchical aggregation\), waiting for the local leader, local "
                     r"rank 0 \(rank 0\), to answer, has waited \d+ s", member.stderr), \
        member.describe()
    # The leader is the slow one: it says so itself, naming who waits for it.
    leader = cluster.result("worker", 0)
    assert re.search(r"stall warning: tensor '[^']+' \(step \d+\) on local rank 0 \(rank 0\) "
                     r"of 2 \(hierarchical aggregation\): local rank 1 \(rank 1\) has handed "
                     r"it over and waited \d+ s for this worker, the local leader, which has "
                     r"not called it yet: this worker is the slow one", leader.stderr), \
        leader.describe()


def test_a_hierarchical_leader_names_the_local_worker_it_waits_for(start_job):
    # Now the member, rank 1, sleeps: its local leader waits for its tensor and names it.
    cluster = start_job({**SHORT, "TFPS_HIERARCHICAL": "1"}, SLEEP_S, sleeper=1)
    cluster.wait()
    cluster.assert_ok()
    leader = cluster.result("worker", 0)
    assert re.search(r"stall warning: tensor '[^']+' \(step \d+\) on local rank 0 \(rank 0\) "
                     r"of 2 \(hierarchical aggregation\), waiting for local rank 1 \(rank 1\) "
                     r"to hand over its tensor, has waited \d+ s", leader.stderr), \
        leader.describe()

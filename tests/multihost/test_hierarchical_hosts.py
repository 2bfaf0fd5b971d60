"""Hierarchical aggregation across emulated hosts: 3 namespace hosts on a bridge with
tbf-limited links (1 Gbit/s), the scheduler on host 0, a server and 2 workers on each of
hosts 1 and 2. Training (a NumPy MLP, tests/multihost/mlp_train_worker.py) must match
single-process training on the concatenated batches, flat and with TFPS_HIERARCHICAL=1;
the hierarchical run must send fewer bytes over the host links, counted by the engine and
by the veth counters. Needs root and `ip netns` (skipped otherwise). ~20-40 s.
"""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(Path(__file__).parent))
from netns_support import AVAILABLE, WHY_NOT, namespaces, require_build  # noqa: E402
from netns import Hosts  # noqa: E402
from ps_cluster import PS_SERVER, netns_host  # noqa: E402
import mlp_train_worker  # noqa: E402
from tfps_harness.launch_cluster import LoggedCluster  # noqa: E402

WORKER = Path(__file__).parent / "mlp_train_worker.py"
SUM_WORKER = REPO / "tests" / "multiprocess" / "core_workers" / "hier_worker.py"
pytestmark = [pytest.mark.skipif(not AVAILABLE, reason=WHY_NOT), pytest.mark.timeout(300)]


class TwoHostJob(LoggedCluster):
    """Scheduler on host 0; server i on host 1+i; worker r on host 1 + worker_hosts[r]."""

    def __init__(self, hosts, workdir, env, worker_hosts=(0, 0, 1, 1)):
        super().__init__(PS_SERVER, workdir, len(worker_hosts), 2, timeout=120, env=env,
                         cwd=REPO,
                         defaults={"OPENBLAS_NUM_THREADS": "1", "TFPS_TIMEOUT": "60",
                                   # namespace hosts reach only each other
                                   "TFPS_INSECURE": "1"})
        self._on = [netns_host(hosts, i) for i in range(3)]
        self.worker_hosts = worker_hosts

    def host(self, role, index):
        if role == "scheduler":
            return self._on[0]
        return self._on[1 + (index if role == "server" else self.worker_hosts[index])]


def run_job(job, argv):
    """Runs `argv` on every worker of `job` to the end; fails the test naming any role that
    failed. Returns the job (closed) for its results."""
    try:
        job.start(argv)
        job.wait()
        failed = job.failures()
        assert not failed, "\n".join(r.describe() for r in failed)
    finally:
        job.close()
    return job


def train(hosts, tmp_path, hierarchical):
    out = tmp_path / f"hierarchical{hierarchical}"
    out.mkdir()
    before = [hosts.link_bytes(i)[0] for i in range(3)]
    job = run_job(TwoHostJob(hosts, out / "logs", {"TFPS_HIERARCHICAL": str(hierarchical)}),
                  [sys.executable, WORKER, out])
    sent = [hosts.link_bytes(i)[0] - b for i, b in zip(range(3), before)]
    results = job.worker_results()
    for rank, result in enumerate(results):
        assert f"local rank {rank % 2} of 2" in result.stdout, result.describe()
    stats = [json.loads(next(line[6:] for line in r.stdout.splitlines()
                             if line.startswith("stats "))) for r in results]
    weights = [dict(np.load(out / f"rank{r}.npz")) for r in range(4)]
    return weights, stats, sent[1] + sent[2]


def test_training_matches_single_process_flat_and_hierarchical(tmp_path):
    require_build("_core*.so")
    oracle = mlp_train_worker.single_process(4)
    with Hosts(3, rate="1gbit") as hosts:
        names = set(hosts.names + [hosts.bridge_ns])
        flat, flat_stats, flat_link = train(hosts, tmp_path, 0)
        hier, hier_stats, hier_link = train(hosts, tmp_path, 1)
    assert not names & namespaces()
    for run in (flat, hier):
        for rank in range(4):
            for name, want in oracle.items():
                np.testing.assert_allclose(run[rank][name], want, rtol=2e-5, atol=2e-6,
                                           err_msg=f"rank {rank}, {name}")
    # Hierarchical: the replicas are bit-identical (each host's sum is added in local-rank
    # order and the server adds the two host sums, which commute).
    for rank in range(1, 4):
        for name in oracle:
            assert hier[rank][name].tobytes() == hier[0][name].tobytes(), (rank, name)
    # Only the leaders push: half the gradient bytes leave the workers, and the links
    # carry less (each host's second worker neither pushes nor pulls).
    gradient_bytes = 4 * sum(v.size for v in oracle.values()) * mlp_train_worker.STEPS
    assert [s["bytes_sent"] for s in flat_stats] == [gradient_bytes] * 4
    assert [s["bytes_sent"] for s in hier_stats] == [gradient_bytes, 0, gradient_bytes, 0]
    assert hier_link < 0.75 * flat_link, (hier_link, flat_link)


def test_two_workers_and_one_alone_sum_exactly_with_chunked_tensors(tmp_path):
    # Host 1 sums workers 0 and 1, host 2's worker 2 pushes alone (cutting the 10 MB tensor
    # into the same chunks); the servers add two summands, so every answer equals NumPy's
    # ((x0 + x1) + x2) bit for bit.
    require_build("_core*.so")
    with Hosts(3, rate="10gbit") as hosts:
        names = set(hosts.names + [hosts.bridge_ns])
        job = run_job(TwoHostJob(hosts, tmp_path / "logs", {"TFPS_HIERARCHICAL": "1",
                                                            "TFPS_PARTITION_BYTES": "65536"},
                                 worker_hosts=(0, 0, 1)),
                      [sys.executable, SUM_WORKER, "3", "--exact"])
    assert not names & namespaces()
    results = job.worker_results()
    assert "local rank 1 of 2" in results[1].stdout
    assert "local rank 0 of 1" in results[2].stdout


def test_join_with_uneven_data_on_two_hosts(tmp_path):
    # 2 workers on each of two hosts (ranks 0, 1 and 2, 3). Epoch 1: host 1's leader (rank
    # 0) joins first and pushes its member's local sums until rank 1 has joined, then
    # releases its join; host 2 trains on, its local sums counted without host 1's
    # (kFlagJoinLeads / kFlagJoinRelease). Epoch 2: the same on host 2 while host 1's
    # member joined first. Sums of small integers: exact whatever the order.
    require_build("_core*.so")
    worker = REPO / "tests" / "multiprocess" / "core_workers" / "join_worker.py"
    with Hosts(3, rate="10gbit") as hosts:
        names = set(hosts.names + [hosts.bridge_ns])
        job = run_job(TwoHostJob(hosts, tmp_path / "logs", {"TFPS_HIERARCHICAL": "1",
                                                            "TFPS_PARTITION_BYTES": "65536",
                                                            "TFPS_TIMEOUT": "300"}),
                      [sys.executable, worker, "1,2,4,5/5,1,2,3", "--integers"])
    assert not names & namespaces()
    for result in job.worker_results():
        assert "epoch 1 ok" in result.stdout and "join ok" in result.stdout, result.describe()

"""Many workers: up to 64 core workers (no TensorFlow) on one host, and 8 emulated hosts
of 8 workers each with hierarchical aggregation; and a worker whose descriptor limit
cannot hold its peer mesh. Each runs tests/scale/scale_worker.py:
a 4 KB and a 1 MB push_pull, a broadcast, an allgather, uneven tails and join(), every
answer checked byte for byte against NumPy. What these cost as N grows is measured by
benchmarks/scale.py (docs/scale.md).

Run time, measured on a 2-core machine under a load of 8 to 50: 4.5 s (8 workers), 18 s
(64 workers), 18-25 s (8 x 8 on namespaces; needs root, skipped otherwise), 4 s (the
descriptor limit): about a minute in all.
"""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "multihost"))
from netns_support import AVAILABLE, WHY_NOT, namespaces, require_build  # noqa: E402
from netns import Hosts  # noqa: E402
from ps_cluster import PS_SERVER, netns_host  # noqa: E402
from tfps_harness.launch_cluster import LoggedCluster  # noqa: E402

WORKER = Path(__file__).parent / "scale_worker.py"
# 64 Python processes on 2 cores: every process gets one BLAS thread, and the engine's
# timeout leaves room for a loaded machine (a hang still ends, with an error naming it).
QUIET = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "TFPS_TIMEOUT": "120"}


def assert_all_ok(cluster):
    failed = cluster.failures()
    assert not failed, "\n".join(result.describe() for result in failed)
    for result in cluster.worker_results():
        assert "scale ok" in result.stdout, result.describe()
    for result in cluster.results():
        assert "ERROR" not in result.stderr, result.describe()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers,servers", [(8, 1), (64, 4)])
def test_many_workers_on_one_host_are_bit_exact(make_cluster, workers, servers):
    cluster = make_cluster(workers, servers, timeout=240, env=QUIET)
    cluster.start([sys.executable, WORKER, "2"])
    cluster.wait()
    assert_all_ok(cluster)


class HostsJob(LoggedCluster):
    """`hosts.n` namespace hosts with `per_host` workers each (rank r on host
    r // per_host); the scheduler on host 0, server i on host i * hosts.n // servers."""

    def __init__(self, hosts, workdir, per_host, servers, env):
        super().__init__(PS_SERVER, workdir, hosts.n * per_host, servers, timeout=240,
                         env=env, cwd=REPO,
                         # namespace hosts reach only each other
                         defaults={**QUIET, "TFPS_INSECURE": "1"})
        self.per_host = per_host
        self._on = [netns_host(hosts, i) for i in range(hosts.n)]

    def host(self, role, index):
        if role == "scheduler":
            return self._on[0]
        if role == "server":
            return self._on[index * len(self._on) // self.num_servers]
        return self._on[index // self.per_host]


@pytest.mark.skipif(not AVAILABLE, reason=WHY_NOT)
@pytest.mark.timeout(400)
def test_eight_hosts_of_eight_workers_hierarchical_are_bit_exact(tmp_path):
    # Each host's leader sums its 8 workers' tensors and pushes once; the servers add 8
    # host sums. Small integers: exact in any order, so every rank must match NumPy.
    require_build("_core*.so")
    with Hosts(8) as hosts:
        names = set(hosts.names + [hosts.bridge_ns])
        job = HostsJob(hosts, tmp_path / "logs", 8, 2,
                       {"TFPS_HIERARCHICAL": "1", "TFPS_PARTITION_BYTES": "262144"})
        try:
            job.start([sys.executable, WORKER, "2"])
            job.wait()
            assert_all_ok(job)
        finally:
            job.close()
    assert not names & namespaces()
    for rank, result in enumerate(job.worker_results()):
        assert f"local rank {rank % 8} of 8" in result.stdout, result.describe()


@pytest.mark.timeout(200)
def test_a_worker_short_of_descriptors_fails_at_the_rendezvous_naming_the_limit(make_cluster):
    # 16 workers need about 5 descriptors per peer each. Rank 3 lowers its hard limit to
    # 85: enough to register and connect, not to accept every peer's connection, where
    # ZeroMQ drops the accept silently and every allgather waited TFPS_TIMEOUT. Now rank 3
    # refuses at the rendezvous and the scheduler tells every other worker why.
    cluster = make_cluster(16, 1, timeout=150, env={**QUIET, "TFPS_TIMEOUT": "60"})
    cluster.start([sys.executable, WORKER, "2", "--nofile", "3:85"])
    cluster.wait()
    short = cluster.result("worker", 3)
    assert short.returncode == 3, short.describe()
    assert "ResourceExhausted: worker 3 needs about" in short.stderr, short.describe()
    assert "RLIMIT_NOFILE allows 85" in short.stderr, short.describe()
    for rank in range(16):
        result = cluster.result("worker", rank)
        assert result.returncode == 3 and "scale ok" not in result.stdout, result.describe()
        assert "RLIMIT_NOFILE" in result.stderr, result.describe()
        assert "timed out" not in result.stderr, result.describe()

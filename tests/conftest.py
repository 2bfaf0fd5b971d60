"""Fixtures shared by the test layers: a cluster of real processes on this host.

pytest puts this folder on sys.path (there is no tests/__init__.py), so tests import
the helper as `from cluster import Cluster`.
"""

import os

import pytest

from cluster import Cluster, require_build


@pytest.fixture
def make_cluster(tmp_path):
    """Returns `make(num_workers, num_servers, **kwargs) -> Cluster` (not yet started).

    Every cluster made is closed (all its processes killed) when the test ends, whether
    it passed or not.
    """
    require_build()
    clusters = []

    def make(num_workers, num_servers, **kwargs):
        cluster = Cluster(tmp_path / f"cluster{len(clusters)}", num_workers, num_servers,
                          **kwargs)
        clusters.append(cluster)
        return cluster

    yield make
    for cluster in clusters:
        cluster.close()


@pytest.fixture(autouse=True)
def _tfps_environment_restored():
    """Each test ends with the TFPS_* environment it started with, so no test's outcome
    depends on which ran before it (a worker module imported for an oracle, say, that
    sets a variable at import)."""
    before = {k: v for k, v in os.environ.items() if k.startswith("TFPS_")}
    yield
    for key in [k for k in os.environ if k.startswith("TFPS_") and k not in before]:
        del os.environ[key]
    os.environ.update(before)

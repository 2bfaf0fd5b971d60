"""Horovod 0.28 semantics found missing by issue 12 (workers/hvd_compat_worker.py):
gradients of broadcast and allgather, float16 scaling, sparse slices without a dense
shape, v1 graph mode, and the Keras callbacks on models built at their first batch."""

import sys
from pathlib import Path

import pytest

WORKERS = Path(__file__).resolve().parent / "workers"
sys.path.insert(0, str(WORKERS))
import harness  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def test_horovod_semantics(make_cluster):
    cluster = make_cluster(2, 1, timeout=240)
    harness.run_and_check(cluster, WORKERS / "hvd_compat_worker.py")

"""Issue 12 (workers/hvdapi_worker.py, 3 workers, 2 servers), each against a
single-process oracle:
  - a rank-local Python error before a collective's op (workers/local_error_worker.py)
    reaches every other rank at once as FailedPreconditionError naming the failing worker
    and its reason, eagerly and in tf.function, and the next collective works;
  - backward_passes_per_step, PartialDistributedOptimizer / PartialDistributedGradientTape
    and register_local_var, start_timeline / stop_timeline, Horovod's fp16 compressor.

TFPS_TIMEOUT is far above the run's own limit: a rank that waited it out to learn of an
error fails the test instead of passing slowly. One cluster for all: each TF start costs
seconds of the CI budget."""

import sys
from pathlib import Path

import pytest

WORKERS = Path(__file__).resolve().parent / "workers"
sys.path.insert(0, str(WORKERS))
import harness  # noqa: E402

pytestmark = pytest.mark.timeout(400)


def test_hvdapi(make_cluster, tmp_path):
    cluster = make_cluster(3, 2, timeout=300, env={"TFPS_TIMEOUT": "900",
                                                    "HVDAPI_TMP": str(tmp_path)})
    harness.run_and_check(cluster, WORKERS / "hvdapi_worker.py")

"""Issue 12: the rest of Horovod's TensorFlow API (workers/hvdapi_worker.py, 2 workers,
1 server), each against a single-process oracle: backward_passes_per_step,
PartialDistributedOptimizer / PartialDistributedGradientTape and register_local_var,
start_timeline / stop_timeline, and Horovod's fp16 compressor."""

import sys
from pathlib import Path

import pytest

WORKERS = Path(__file__).resolve().parent / "workers"
sys.path.insert(0, str(WORKERS))
import harness  # noqa: E402

pytestmark = pytest.mark.timeout(400)


def test_hvdapi(make_cluster, tmp_path):
    cluster = make_cluster(2, 1, timeout=300, env={"TFPS_TIMEOUT": "120",
                                                    "HVDAPI_TMP": str(tmp_path)})
    harness.run_and_check(cluster, WORKERS / "hvdapi_worker.py")

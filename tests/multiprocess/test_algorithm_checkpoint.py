"""Algorithm state (LowPrecisionDecentralized's public copies, QAdam's m and v, the step
counter) in tf.train.Checkpoint: saved, restored into fresh objects before they are built,
equal afterwards, and training continues exactly as without the interruption (2 workers,
~15 s)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "workers"))
import harness  # noqa: E402

WORKER = Path(__file__).resolve().parent / "algorithm_workers" / "checkpoint_worker.py"

pytestmark = pytest.mark.timeout(300)


def test_algorithm_state_round_trips_through_checkpoints(make_cluster):
    cluster = make_cluster(2, 1, timeout=240, env={"TFPS_TIMEOUT": "60"})
    harness.run_and_check(cluster, WORKER)

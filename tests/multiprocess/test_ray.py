"""tf_ps_ops.ray on a local Ray cluster started by the test: scheduler, a server and two
workers as Ray actors in placement groups; the training function push_pulls through the
servers and rank 0's result is checked against NumPy. Skipped when ray is not installed
(requirements-ray.txt). ~30-60 s on 2 cores (Ray's start, TensorFlow in two actors).
"""

from pathlib import Path

import numpy as np
import pytest

from cluster import REPO, require_build

ray = pytest.importorskip(
    "ray", reason="ray is not installed (pip install -r requirements-ray.txt)")
pytestmark = pytest.mark.timeout(300)
HERE = Path(__file__).resolve().parent


def train(scale):
    import numpy as np
    import tensorflow as tf

    import tf_ps_ops as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    mine = np.arange(1000, dtype=np.float32) * (rank + 1) * scale
    summed = hvd.push_pull(tf.constant(mine), average=False, name="x").numpy()
    return rank, size, hvd.num_servers(), summed


@pytest.fixture
def local_ray():
    require_build()
    ray.init(num_cpus=4, include_dashboard=False, object_store_memory=100 << 20,
             log_to_driver=True,
             # This folder too: the actors unpickle `train` by reference to this module.
             runtime_env={"env_vars": {"PYTHONPATH": f"{REPO}:{HERE}:{REPO / 'tests'}",
                                       "TF_CPP_MIN_LOG_LEVEL": "2",
                                       "OPENBLAS_NUM_THREADS": "1"}})
    try:
        yield
    finally:
        ray.shutdown()


def test_ray_executor_runs_a_job_and_returns_rank_0s_result(local_ray):
    from tf_ps_ops.ray import RayExecutor

    executor = RayExecutor(num_workers=2, env={"TFPS_TIMEOUT": "60"})
    try:
        executor.start(timeout_s=120)
        assert executor.num_servers == 1  # one per node: the local cluster has one
        rank, size, num_servers, summed = executor.run(train, args=(2.0,), timeout_s=180)
        assert (rank, size, num_servers) == (0, 2, 1)
        np.testing.assert_allclose(summed, np.arange(1000, dtype=np.float32) * 2.0 * (1 + 2))
        # A second function on the same job: every worker's result, in rank order.
        results = executor.run_all(train, args=(1.0,), timeout_s=120)
        assert [r[0] for r in results] == [0, 1]
    finally:
        executor.shutdown()


def test_a_failing_training_function_raises_its_error(local_ray):
    from tf_ps_ops.ray import RayExecutor

    def fail():
        raise ValueError("bad batch")

    executor = RayExecutor(num_workers=1).start(timeout_s=120)
    try:
        with pytest.raises(Exception, match="bad batch"):
            executor.run(fail, timeout_s=60)
    finally:
        executor.shutdown()

"""RayExecutor(min_workers, max_workers) on a local one-node Ray cluster: the driver finds
the node's slots, starts a worker actor in each, publishes the epochs to them and takes
their joins and acks back; the weights equal a NumPy replay, alike on every worker.
A node added and removed mid-training: test_ray_multinode.py. ~1-3 min on 2 cores."""

import time
from pathlib import Path

import numpy as np
import pytest

from cluster import REPO, require_build

ray = pytest.importorskip(
    "ray", reason="ray is not installed (pip install -r requirements-ray.txt)")
pytestmark = pytest.mark.timeout(400)
HERE = Path(__file__).resolve().parent
WORKERS = HERE / "elastic_workers"


def elastic_train(out_dir, min_steps, size_runs):
    import os

    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import tf_ps_ops as hvd
    from loop_gradient import LR, gradient

    me = os.environ["TFPS_ELASTIC_ID"]
    hvd.init()
    w = tf.Variable(np.zeros(4), dtype=tf.float64)
    state = hvd.elastic.TensorFlowState([w], step=0, history=())

    def done():
        sizes = [len(ids) for ids in state.history]
        runs = [n for k, n in enumerate(sizes) if k == 0 or sizes[k - 1] != n]
        return state.step >= min_steps and runs == size_runs

    @hvd.elastic.run
    def train(state):
        while not done():
            if state.step >= 2000:
                raise RuntimeError(f"no run of sizes {size_runs} by step 2000")
            g = hvd.allreduce(tf.constant(gradient(me, state.step)), name="grad")
            ids = hvd.allgather_object(me, name="ids")
            w.assign_sub(LR * g)
            state.history = state.history + (tuple(ids),)
            state.step += 1
            state.commit()
            open(os.path.join(out_dir, f"size-{len(ids)}"), "w").close()
            time.sleep(0.1)

    train(state)
    return {"id": me, "w": w.numpy().tolist(), "history": state.history,
            "rank": hvd.rank(), "size": hvd.size()}


def replay(history):
    import sys
    sys.path.insert(0, str(WORKERS))
    from loop_gradient import LR, gradient
    w = np.zeros(4)
    for step, ids in enumerate(history):
        w -= LR * np.mean([gradient(i, step) for i in ids], axis=0)
    return w


@pytest.fixture
def local_ray():
    require_build()
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 << 20,
             log_to_driver=True, runtime_env={"env_vars": {
                 "PYTHONPATH": f"{REPO}:{HERE}:{WORKERS}:{REPO / 'tests'}",
                 "TF_CPP_MIN_LOG_LEVEL": "2", "OPENBLAS_NUM_THREADS": "1"}})
    try:
        yield
    finally:
        ray.shutdown()


def test_an_elastic_job_on_one_node_fills_its_slots_and_trains(local_ray, tmp_path):
    """One node of 2 CPUs: min_workers=1, max_workers=3 gives 2 workers (the node's
    slots), epochs reach the actors and their joins and acks come back; the weights equal
    a NumPy replay, alike on both."""
    from tf_ps_ops.ray import RayExecutor

    executor = RayExecutor(min_workers=1, max_workers=3, cpus_per_worker=1,
                           env={"TFPS_HEARTBEAT_TIMEOUT": "5", "TFPS_TIMEOUT": "300"})
    executor.start()
    try:
        results = executor.run_all(elastic_train, args=(str(tmp_path), 5, [2]),
                                   timeout_s=400)
    finally:
        executor.shutdown()
    assert [(r["id"], r["rank"], r["size"]) for r in results] == [("w0", 0, 2), ("w1", 1, 2)]
    history = results[0]["history"]
    assert results[1]["history"] == history and results[1]["w"] == results[0]["w"]
    assert [tuple(h) for h in history] == [("w0", "w1")] * len(history)
    np.testing.assert_allclose(results[0]["w"], replay(history), rtol=1e-12)

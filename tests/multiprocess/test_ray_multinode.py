"""RayExecutor(min_workers=1, max_workers=2) across Ray nodes: a multi-node Ray cluster on
this machine (ray.cluster_utils.Cluster) starts with one node of one CPU; once training
runs, a second node is added: the driver finds its slot, a worker starts there and joins
(synced from rank 0: the same weights as the first worker at every step they share);
then that node is removed and the job shrinks back to one worker and finishes. The weights
equal a NumPy replay of the sizes each step had."""

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from cluster import REPO, require_build

ray = pytest.importorskip(
    "ray", reason="ray is not installed (pip install -r requirements-ray.txt)")
cluster_utils = pytest.importorskip("ray.cluster_utils")
pytestmark = pytest.mark.timeout(400)
HERE = Path(__file__).resolve().parent
WORKERS = HERE / "elastic_workers"
NODE = {"num_cpus": 1, "object_store_memory": 80 << 20}


def train(out_dir, min_steps):
    """Runs until the sizes of the steps were 1, then 2, then 1 again (merged runs) and
    min_steps are done; every step of 2 workers leaves each one's weights in a file."""
    import os

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import tf_ps_ops as hvd

    me = os.environ["TFPS_ELASTIC_ID"]
    hvd.init()
    w = tf.Variable(tf.zeros([4], tf.float64))
    state = hvd.elastic.TensorFlowState([w], step=0, sizes=())

    def done():
        runs = [n for k, n in enumerate(state.sizes) if k == 0 or state.sizes[k - 1] != n]
        return state.step >= min_steps and runs == [1, 2, 1]

    @hvd.elastic.run
    def loop(state):
        while not done():
            if state.step >= 2000:
                raise RuntimeError(f"sizes {state.sizes[-20:]}: no 1, 2, 1 by step 2000")
            g = hvd.allreduce(tf.fill([4], tf.constant(float(hvd.rank() + state.step),
                                                       tf.float64)), name="grad")
            w.assign_sub(0.01 * g)
            state.sizes = state.sizes + (hvd.size(),)
            state.step += 1
            state.commit()
            if hvd.size() == 2:
                with open(os.path.join(out_dir, f"w-{me}-{state.step}.json"), "w") as f:
                    json.dump(w.numpy().tolist(), f)
            open(os.path.join(out_dir, f"size-{hvd.size()}"), "w").close()
            time.sleep(0.05)

    loop(state)
    return {"id": me, "w": w.numpy().tolist(), "sizes": state.sizes}


def replay(sizes):
    """NumPy: rank r of n adds r + step; the average is step + (n - 1) / 2."""
    w = np.zeros(4)
    for step, n in enumerate(sizes):
        w -= 0.01 * (step + (n - 1) / 2)
    return w


def wait_for(path, what, seconds=120):
    give_up = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < give_up, f"no {what} within {seconds} s"
        time.sleep(0.1)


@pytest.fixture
def ray_cluster():
    require_build()
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={
        **NODE, "include_dashboard": False})
    ray.init(address=cluster.address, log_to_driver=True, runtime_env={"env_vars": {
        "PYTHONPATH": f"{REPO}:{HERE}:{WORKERS}:{REPO / 'tests'}",
        "TF_CPP_MIN_LOG_LEVEL": "2", "OPENBLAS_NUM_THREADS": "1"}})
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_a_node_added_mid_training_joins_and_its_removal_shrinks_the_job(ray_cluster,
                                                                          tmp_path):
    from tf_ps_ops.ray import RayExecutor

    executor = RayExecutor(min_workers=1, max_workers=2, cpus_per_worker=1,
                           env={"TFPS_HEARTBEAT_TIMEOUT": "5", "TFPS_TIMEOUT": "300"})
    executor.start()
    outcome = {}

    def run():
        try:
            outcome["results"] = executor.run_all(train, args=(str(tmp_path), 10),
                                                  timeout_s=300)
        except BaseException as e:  # noqa: BLE001 -- re-raised by the test thread
            outcome["error"] = e

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    try:
        wait_for(tmp_path / "size-1", "step on the first node")
        node = ray_cluster.add_node(**NODE)
        wait_for(tmp_path / "size-2", "step with the second node's worker")
        time.sleep(1.0)  # a few steps of two
        ray_cluster.remove_node(node)
        runner.join(timeout=300)
        assert not runner.is_alive(), "the job did not finish after the node was removed"
    finally:
        executor.shutdown()
    if "error" in outcome:
        raise outcome["error"]
    [result] = outcome["results"]
    assert result["id"] == "w0"
    sizes = result["sizes"]
    runs = [n for k, n in enumerate(sizes) if k == 0 or sizes[k - 1] != n]
    assert runs == [1, 2, 1]
    np.testing.assert_allclose(result["w"], replay(sizes), rtol=1e-12)
    # While both trained, their weights were the same after every step: the newcomer was
    # synced when it joined and then took part in every sum.
    # (A commit that brings news of the membership raises before the file is written.)
    shared = sorted(int(p.stem.split("-")[2]) for p in tmp_path.glob("w-w1-*.json")
                    if (tmp_path / f"w-w0-{p.stem.split('-')[2]}.json").exists())
    assert shared, "the second node's worker recorded no step alongside the first"
    for step in shared:
        mine = json.loads((tmp_path / f"w-w0-{step}.json").read_text())
        assert json.loads((tmp_path / f"w-w1-{step}.json").read_text()) == mine
        np.testing.assert_allclose(mine, replay(sizes[:step]), rtol=1e-12)

"""Sparse gradients (an embedding table's tf.IndexedSlices) as Horovod reduces them.

One cluster run (workers/sparse_worker.py, 2 workers, 1 server) trains through
DistributedGradientTape, a Keras 3 DistributedOptimizer under `fit` and a tf_keras one,
each with sparse_as_dense False (the default: values and indices are allgathered, so the
table never goes to the servers) and True (the table is reduced dense through them).
This process then trains the single-process oracle on the concatenated batches and
compares; the bytes each worker sent to the servers show which way the table travelled.
"""

from pathlib import Path

import numpy as np
import pytest

from oracles import train_on_cluster, worker_module

SPARSE_WORKER = Path(__file__).resolve().parent / "workers" / "sparse_worker.py"

pytestmark = pytest.mark.timeout(300)


def _worker():
    return worker_module(SPARSE_WORKER)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    saved, _ = train_on_cluster(tmp_path_factory, SPARSE_WORKER, 2, 1, timeout=200)
    return saved


def assert_close(actual, desired, message):
    scale = float(np.max(np.abs(desired)))
    np.testing.assert_allclose(actual, desired, rtol=1e-5, atol=1e-5 * scale, err_msg=message)


def _assert_traffic(trained, name, steps, table_bytes):
    """Dense: at least the table every step; sparse: less than one table in all."""
    for rank, result in enumerate(trained):
        sparse = float(result[f"{name}.False.server_bytes"])
        dense = float(result[f"{name}.True.server_bytes"])
        assert dense >= steps * table_bytes, (rank, name, dense)
        assert sparse < table_bytes, (rank, name, sparse)


@pytest.mark.parametrize("dense", [False, True])
def test_tape_matches_single_process(trained, dense):
    worker = _worker()
    ids, y = worker.dataset()
    initial = {name: var.numpy() for name, var in worker.tape_variables().items()}
    expected = worker.train_with_tape(worker.tape_variables(), ids, y,
                                      worker.NUM_WORKERS * worker.BATCH)
    assert not np.allclose(expected["kernel"], initial["kernel"]), "the oracle did not train"
    for rank, result in enumerate(trained):
        for name, value in expected.items():
            assert_close(result[f"tape.{dense}.{name}"], value,
                         f"rank {rank}, sparse_as_dense={dense}, {name}")
    _assert_traffic(trained, "tape", worker.STEPS, worker.ROWS * worker.WIDTH * 4)


@pytest.mark.parametrize("flavor", ["fit", "tf_keras"])
@pytest.mark.parametrize("dense", [False, True])
def test_keras_matches_single_process(trained, flavor, dense):
    worker = _worker()
    ids, y = worker.dataset()
    module = worker._tf_keras() if flavor == "tf_keras" else worker.keras
    optimizer = module.optimizers.SGD(worker.LEARNING_RATE)
    weights, _ = worker.fit(worker.keras_model(module), optimizer, ids, y,
                            worker.NUM_WORKERS * worker.BATCH)
    initial = worker.keras_model(module).get_weights()
    assert not np.allclose(weights[0], initial[0]), "the oracle did not train the table"
    for rank, result in enumerate(trained):
        for i, weight in enumerate(weights):
            assert_close(result[f"{flavor}.{dense}.{i}"], weight,
                         f"rank {rank}, {flavor}, sparse_as_dense={dense}, weight {i}")
    _assert_traffic(trained, flavor, worker.STEPS, worker.ROWS * worker.WIDTH * 4)

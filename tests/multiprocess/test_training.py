"""Distributed training reproduces single-process training on the concatenated batch.

One cluster run (workers/train_worker.py, 3 workers, 2 servers) trains with
DistributedGradientTape and with Keras `fit` + DistributedOptimizer; this process then
trains the single-process oracle with the same code and compares. Twice: with the
engine's default scheduling, and with credit on and fusion off.
"""

from pathlib import Path

import numpy as np
import pytest

from oracles import train_on_cluster, worker_module

TRAIN_WORKER = Path(__file__).resolve().parent / "workers" / "train_worker.py"

pytestmark = pytest.mark.timeout(300)


def assert_close(actual, desired, message):
    """rtol 1e-5, with elements near zero judged against the tensor's scale: float32
    sums in another order (the servers add workers in arrival order, 3 x 4 rows instead
    of 12) differ by ~1e-6 of the largest weight after 20 momentum steps, while a wrong
    average is off by the size of an update (~1e-2)."""
    scale = float(np.max(np.abs(desired)))
    np.testing.assert_allclose(actual, desired, rtol=1e-5, atol=1e-5 * scale, err_msg=message)


def _train_worker():
    # Imported only when needed: it imports TensorFlow, which test collection should not.
    return worker_module(TRAIN_WORKER)


# The engine's defaults, and its other scheduling: small partitions under a small credit
# (so partitions wait and leave in priority order as acknowledgements come) and no fusion.
# The results must not change.
SCHEDULING = {
    "defaults": {},
    # 8-byte partitions (2 floats): the 8x4 kernel is 16 of them, 8 may be in flight.
    "credit_no_fusion": {"TFPS_SCHEDULING_CREDIT": "64", "TFPS_PARTITION_BYTES": "8",
                         "TFPS_FUSION_BYTES": "0"},
    # The 3 workers share this host: one local sum through shared memory, one push.
    "hierarchical": {"TFPS_HIERARCHICAL": "1"},
}


@pytest.fixture(scope="module", params=sorted(SCHEDULING))
def trained(request, tmp_path_factory):
    """What every worker wrote: a list, by rank, of {name: array}."""
    # Our own workers never send what a server drops as malformed (an abort cut into
    # 8-byte partitions did, and the others waited TFPS_TIMEOUT).
    saved, _ = train_on_cluster(tmp_path_factory, TRAIN_WORKER, _train_worker().NUM_WORKERS, 2,
                                timeout=200, env=SCHEDULING[request.param],
                                servers_never_log=("dropped a malformed message",))
    return saved


def test_gradient_tape_matches_single_process(trained):
    worker = _train_worker()
    x, ids, y = worker.dataset()
    initial = {name: var.numpy() for name, var in worker.tape_variables(seed=0).items()}
    expected = worker.train_with_tape(worker.tape_variables(seed=0), x, ids, y,
                                      worker.NUM_WORKERS * worker.BATCH)
    assert not np.allclose(expected["kernel"], initial["kernel"]), "the oracle did not train"
    for rank, result in enumerate(trained):
        for name, value in expected.items():
            assert_close(result[f"tape.{name}"], value, f"rank {rank}, variable {name}")


def test_keras_fit_matches_single_process(trained):
    worker = _train_worker()
    num_weights = sum(key.startswith("fit.final.") for key in trained[0])
    initial = [trained[0][f"fit.initial.{i}"] for i in range(num_weights)]
    assert not np.array_equal(initial[0], trained[1]["fit.initial.0"]), (
        "workers started from the same weights: the broadcast is not tested")

    # Every worker ends with the same weights and (MetricAverageCallback) the same losses.
    for rank, result in enumerate(trained[1:], start=1):
        for i in range(num_weights):
            np.testing.assert_array_equal(result[f"fit.final.{i}"], trained[0][f"fit.final.{i}"],
                                          err_msg=f"weight {i} differs on rank {rank}")
        np.testing.assert_array_equal(result["fit.loss"], trained[0]["fit.loss"])

    # ... which are those of single-process training from rank 0's initial weights.
    x, _, y = worker.dataset()
    rows = worker.FIT_STEPS * worker.NUM_WORKERS * worker.BATCH
    model = worker.keras_model(seed=0)
    model.set_weights(initial)
    model.compile(optimizer=worker.sgd_momentum(), loss="mse")
    history = model.fit(x[:rows], y[:rows], batch_size=worker.NUM_WORKERS * worker.BATCH,
                        epochs=worker.FIT_EPOCHS, shuffle=False, verbose=0)
    for i, weight in enumerate(model.get_weights()):
        assert_close(trained[0][f"fit.final.{i}"], weight, f"weight {i}")
    assert_close(trained[0]["fit.loss"], history.history["loss"], "epoch losses")

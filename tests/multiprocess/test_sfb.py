"""Sufficient Factor Broadcasting across real workers (sfb_workers/).

One 3-worker cluster runs every training check (sfb_train_worker.py); this process then
trains the single-process oracles with the same code and compares. A 2-worker cluster
counts the bytes a 4096×4096 layer puts on the wire (sfb_bytes_worker.py).
"""

import json
from pathlib import Path

import numpy as np
import pytest

from oracles import harness, train_on_cluster, worker_module

SFB_WORKERS = Path(__file__).resolve().parent / "sfb_workers"
TRAIN_WORKER = SFB_WORKERS / "sfb_train_worker.py"

pytestmark = pytest.mark.timeout(300)
TOLERANCE = dict(rtol=1e-5, atol=1e-6)


def _worker():
    return worker_module(TRAIN_WORKER)  # imports TensorFlow: only when a test needs it


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(what every worker wrote: a list by rank of {name: array}, the workers' results)."""
    return train_on_cluster(tmp_path_factory, TRAIN_WORKER, 3, 1, timeout=150,
                            env={"TFPS_TIMEOUT": "60"})


def _weights(saved, prefix):
    return [saved[f"{prefix}.{i}"] for i in range(sum(k.startswith(prefix + ".") for k in saved))]


def _assert_replicas_identical(saved, prefix):
    reference = _weights(saved[0], prefix)
    assert reference, f"no weights saved under {prefix}"
    for rank, result in enumerate(saved[1:], start=1):
        for i, (mine, theirs) in enumerate(zip(_weights(result, prefix), reference)):
            np.testing.assert_array_equal(mine, theirs, err_msg=f"{prefix} weight {i}, rank {rank}")


def test_factor_gradient_identical_on_every_worker(trained):
    saved, _ = trained  # each worker already compared its G with NumPy, bit for bit
    for result in saved[1:]:
        np.testing.assert_array_equal(result["exact.avg"], saved[0]["exact.avg"])


def test_sfb_fit_matches_single_process_and_push_pull(trained):
    saved, _ = trained
    worker = _worker()
    for prefix in ("fit.sfb", "fit.push_pull"):
        _assert_replicas_identical(saved, prefix)
    initial = _weights(saved[0], "fit.initial")
    x, y = worker.dataset(worker.FIT_STEPS * worker.NUM_WORKERS * worker.BATCH, 12)
    model = worker.mlp(seed=0)
    model.set_weights(initial)
    model.compile(optimizer=worker.sgd_momentum(), loss="mse", jit_compile=False)
    model.fit(x, y, batch_size=worker.NUM_WORKERS * worker.BATCH, epochs=1, shuffle=False,
              verbose=0)
    expected = model.get_weights()
    assert not np.allclose(expected[0], initial[0]), "the oracle did not train"
    for prefix in ("fit.sfb", "fit.push_pull"):
        for i, (got, want) in enumerate(zip(_weights(saved[0], prefix), expected)):
            np.testing.assert_allclose(got, want, **TOLERANCE, err_msg=f"{prefix} weight {i}")


def test_unequal_batches_match_push_pull(trained):
    saved, _ = trained
    for prefix in ("tape.sfb", "tape.push_pull"):
        _assert_replicas_identical(saved, prefix)
    for i, (got, want) in enumerate(zip(_weights(saved[0], "tape.sfb"),
                                        _weights(saved[0], "tape.push_pull"))):
        np.testing.assert_allclose(got, want, **TOLERANCE, err_msg=f"weight {i}")


def test_hybrid_conv_model_matches_single_process(trained):
    saved, results = trained
    _assert_replicas_identical(saved, "hybrid")
    worker = _worker()
    x, y = worker.images(worker.HYBRID_STEPS * worker.NUM_WORKERS * worker.BATCH)
    model = worker.conv_model(seed=3)
    model.compile(optimizer=worker.sgd_momentum(), loss="mse", jit_compile=False)
    model.fit(x, y, batch_size=worker.NUM_WORKERS * worker.BATCH, epochs=1, shuffle=False,
              verbose=0)
    for i, (got, want) in enumerate(zip(_weights(saved[0], "hybrid"), model.get_weights())):
        np.testing.assert_allclose(got, want, **TOLERANCE, err_msg=f"weight {i}")
    # The decision table is logged once, by rank 0 only.
    tables = [result.stderr.count("HybComm:") for result in results]
    assert tables == [1, 0, 0], tables
    row = next(line for line in results[0].stderr.splitlines() if line.startswith("fc_big"))
    assert row.split()[-1] == "sfb" and "144×64" in row, row


def test_sfb_bytes_per_step_for_4096x4096(make_cluster):
    cluster = make_cluster(2, 1, timeout=120)
    harness.run_and_check(cluster, SFB_WORKERS / "sfb_bytes_worker.py")
    for result in cluster.worker_results():
        line = next(l for l in result.stdout.splitlines() if l.startswith("SFB_BENCH "))
        bench = json.loads(line.split(" ", 1)[1])
        print(line)
        sfb_bytes = 32 * (4096 + 4096) * 4
        assert abs(bench["sfb_bytes_per_step_per_peer"] - sfb_bytes) <= 0.1 * sfb_bytes, bench
        # The dense path pushes the whole M·N gradient (and its partitions' headers).
        assert bench["dense_bytes_per_step"] >= 4096 * 4096 * 4, bench

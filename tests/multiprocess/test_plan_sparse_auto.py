"""plan="auto" on a model with an Embedding, on a real cluster (2 workers, 1 server,
loopback): the bytes the embedding's gather sends are the planner's prediction, a pin to
dense summation takes effect, and both train the single-process weights
(sfb_workers/plan_sparse_worker.py)."""

from pathlib import Path

import keras
import numpy as np
import pytest

from oracles import saved_weights, train_on_cluster, worker_module

WORKER = Path(__file__).resolve().parent / "sfb_workers" / "plan_sparse_worker.py"
pytestmark = pytest.mark.timeout(400)


def test_auto_plan_gathers_embedding_rows_as_predicted(tmp_path_factory):
    saved, _ = train_on_cluster(tmp_path_factory, WORKER, 2, 1, timeout=280,
                                env={"TFPS_TIMEOUT": "150"})
    worker = worker_module(WORKER)
    x, y = worker.data(worker.STEPS * 2 * worker.BATCH)
    model = worker.embedding_model()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=False)
    model.fit(x, y, batch_size=2 * worker.BATCH, epochs=1, shuffle=False, verbose=0)
    for prefix in ("gather", "dense"):
        for rank in (0, 1):
            mine = saved_weights(saved[rank], prefix)
            assert len(mine) == len(model.get_weights()), prefix
            for i, (got, want) in enumerate(zip(mine, model.get_weights())):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6,
                                           err_msg=f"{prefix}, rank {rank}, weight {i}")

"""The automatic plan on a real cluster (2 workers, 1 server, loopback): it measures the
link through the transport, plans, and trains to the same weights as the same choices
made by hand, and as single-process training (sfb_workers/plan_worker.py); on a model
with an Embedding the rows it gathers are the bytes it predicted, and a pin to dense
summation takes effect (sfb_workers/plan_sparse_worker.py, in the same cluster)."""

import os
import re
from pathlib import Path

import keras
import numpy as np
import pytest

from oracles import saved_weights, train_on_cluster, worker_module
from tf_ps_ops.plan import cost

WORKER = Path(__file__).resolve().parent / "sfb_workers" / "plan_worker.py"
SPARSE_WORKER = WORKER.parent / "plan_sparse_worker.py"
PS_WORKER = WORKER.parent / "plan_ps_worker.py"
pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    # Generous timeouts: importing TensorFlow alone can take a minute on a loaded machine.
    # Without hierarchical aggregation: with it, on one machine, the plan keeps the
    # default configuration (measure.one_machine_hierarchical), and these checks are of
    # a plan that chooses.
    return train_on_cluster(tmp_path_factory, WORKER, 2, 1, timeout=320,
                            env={"TFPS_TIMEOUT": "150", "TFPS_HIERARCHICAL": "0"})


def test_auto_plan_trains_like_the_hand_picked_configuration(trained):
    saved, results = trained
    for prefix in ("auto", "hand"):
        pairs = zip(saved_weights(saved[1], prefix), saved_weights(saved[0], prefix))
        for i, (mine, theirs) in enumerate(pairs):
            np.testing.assert_array_equal(mine, theirs, err_msg=f"{prefix} {i}: replicas")
    auto, hand = saved_weights(saved[0], "auto"), saved_weights(saved[0], "hand")
    assert auto and len(auto) == len(hand)
    for i, (a, h) in enumerate(zip(auto, hand)):
        np.testing.assert_array_equal(a, h, err_msg=f"weight {i}: auto vs hand-picked")
    # The oracle: single-process training on the concatenated global batches.
    worker = worker_module(WORKER)
    x, y = worker.images(worker.STEPS * 2 * worker.BATCH)
    model = worker.conv_model(seed=3)
    model.compile(optimizer=worker.sgd_momentum(), loss="mse", jit_compile=False)
    model.fit(x, y, batch_size=2 * worker.BATCH, epochs=1, shuffle=False, verbose=0)
    for i, (got, want) in enumerate(zip(auto, model.get_weights())):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"weight {i}")
    # Rank 0 logged both plans (the model's, the optimizer's) and the measurements.
    logs = [r.stderr for r in results]
    # (7: the embedding checks' three trainings and the PS checks' two log theirs too.)
    assert [log.count("plan: 2 workers") for log in logs] == [7, 0], logs[0][-3000:]
    assert logs[0].count("measured: link ") == 7
    assert "hierarchical aggregation sums them here first" not in logs[0]
    # The CPU floor's inputs: both workers on this one machine are each a host of the
    # cost model (one host: every worker counts as its own), so they share its cores.
    cores = len(os.sched_getaffinity(0))
    found = re.findall(r"([0-9.e+]+) cores per host, transport CPU ([0-9.e+]+) ns/byte, "
                       r"([0-9.e+]+) us/message and ([0-9.e+]+) us/partition, TensorFlow "
                       r"([0-9.e+]+) us per collective op, ([0-9.e+]+) ns per gathered row's "
                       r"update, SFB rebuild "
                       r"([0-9.e+]+) GMAC/s \+ ([0-9.e+]+) ns per element and worker", logs[0])
    assert len(found) == 7, logs[0][-3000:]
    # The model's own synchronised step (sfb.convert's plan, the first) priced its
    # collective ops; the optimizer's plans, made from gradients alone, price none. The
    # plans of a model with an embedding priced its gathered rows' update (in Keras' fit
    # and in an autograph step); the first two, with none, have no such price.
    per_op = [float(f[4]) for f in found]
    assert per_op[0] >= 0 and per_op[1:] == [0] * 6, found
    rows = [float(f[5]) for f in found]
    assert rows[:2] == [0, 0] and rows[2] > 0 and rows[4] > 0, found
    for per_host, per_byte, per_message, per_partition, _, _, rebuild, rebuild_fixed in found:
        assert float(per_host) == pytest.approx(cores / 2, rel=1e-3)
        assert float(per_byte) > 0 and float(per_message) > 0 and float(rebuild) > 0, found
        # one server: nothing of 128 KiB is cut, and the default price stays
        assert float(per_partition) == pytest.approx(cost.TRANSPORT_PER_PARTITION * 1e6), found
        assert float(rebuild_fixed) >= 0, found
    # The model's step beside the link (profile.model_compute_loss): rank 0's on both.
    losses = [saved[rank]["model_losses"] for rank in (0, 1)]
    np.testing.assert_array_equal(losses[0], losses[1])
    assert 0 <= losses[0][0] <= 1 and losses[0][1] >= 0, losses[0]
    # The TensorFlow threads' CPU per collective op of the model's synchronised step
    # (profile.sync_op_cpu): measured, rank 0's on both; where one worker cannot run the
    # model, neither measures and neither waits for the other.
    per_op = [float(saved[rank]["sync_op_cpu"]) for rank in (0, 1)]
    assert per_op[0] == per_op[1] and 0 <= per_op[0] < 0.01, per_op
    assert [bool(saved[rank]["sync_op_cpu_unrunnable_is_none"]) for rank in (0, 1)] == \
        [True, True]
    updates = [float(saved[rank]["update_per_byte"]) for rank in (0, 1)]
    assert updates[0] == updates[1] and 0 < updates[0] < 1e-6, updates
    assert len(re.findall(r"lost while communicating, its kernels' CPU \+[0-9]+% then",
                          logs[0])) == 7, logs[0][-3000:]
    assert logs[0].count("engine settings") == 7  # the running ones, or better ones
    assert logs[0].count("plan monitor: step ") == 4 and "plan monitor" not in logs[1]
    # Each plan is made under the running engine's settings (the defaults here).
    assert logs[0].count("partition 1048576 B, fusion 262144 B, credit 0 B;") == 7
    print("\n".join(l for l in logs[0].splitlines() if not l.startswith(("20", "W0", "I0"))))


def test_autotune_changes_settings_not_training(trained):
    saved, results = trained
    worker = worker_module(WORKER)
    tuned = [saved_weights(saved[rank], "tuned") for rank in range(2)]
    assert tuned[0] and len(tuned[0]) == len(tuned[1])
    for i, (mine, theirs) in enumerate(zip(*tuned)):
        np.testing.assert_array_equal(mine, theirs, err_msg=f"tuned weight {i}: replicas")
    # The oracle: single-process training on the concatenated global batches.
    x, y = worker.images(worker.TUNE_STEPS * 2 * worker.BATCH, seed=7)
    model = worker.conv_model(seed=5)
    model.compile(optimizer=worker.sgd_momentum(), loss="mse", jit_compile=False)
    model.fit(x, y, batch_size=2 * worker.BATCH, epochs=1, shuffle=False, verbose=0)
    for i, (got, want) in enumerate(zip(tuned[0], model.get_weights())):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"weight {i}")
    log = results[0].stderr
    # 9 samples, or 7 when it kept no fusion batches (no cycle times then), and 2 more
    # where the best was timed again beside the running settings (the worker checks which).
    samples = log.count("autotune: fusion ")
    assert samples in (7, 9, 11) and log.count("autotune: trying ") == samples - 1, \
        log[-3000:]
    assert "autotune: keeping fusion " in log and "autotune" not in results[1].stderr
    print("\n".join(line for line in log.splitlines() if "autotune: " in line))  # -s


def test_auto_plan_gathers_embedding_rows_as_predicted(trained):
    saved, _ = trained
    worker = worker_module(SPARSE_WORKER)
    x, y = worker.data(worker.STEPS * 2 * worker.BATCH)
    model = worker.embedding_model()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=False)
    model.fit(x, y, batch_size=2 * worker.BATCH, epochs=1, shuffle=False, verbose=0)
    # Both workers planned with rank 0's price of SGD's update of a gathered row.
    prices = [float(saved[rank]["apply_per_row"]) for rank in (0, 1)]
    assert prices[0] == prices[1] > 0, prices
    for prefix in ("gather", "dense"):
        for rank in (0, 1):
            mine = saved_weights(saved[rank], prefix)
            assert len(mine) == len(model.get_weights()), prefix
            for i, (got, want) in enumerate(zip(mine, model.get_weights())):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6,
                                           err_msg=f"{prefix}, rank {rank}, weight {i}")


def test_auto_plan_gives_pinned_gradients_to_the_servers(trained):
    """PS mode under plan="auto" trains what single-process training does: SGD's sparse
    row updates of an Embedding and Adam's dense one, run by the servers."""
    saved, results = trained
    worker = worker_module(PS_WORKER)
    x, y = worker.data(worker.STEPS * 2 * worker.BATCH)
    emb = worker.embedding_model()
    emb.compile(optimizer=keras.optimizers.SGD(worker.SGD_RATE), loss="mse",
                jit_compile=False)
    emb.fit(x, y, batch_size=2 * worker.BATCH, epochs=1, shuffle=False, verbose=0)
    x, y = worker.images(worker.STEPS * 2 * worker.BATCH, seed=13)
    conv = worker.conv_model(seed=13)
    conv.compile(optimizer=keras.optimizers.Adam(worker.ADAM_RATE), loss="mse",
                 jit_compile=False)
    conv.fit(x, y, batch_size=2 * worker.BATCH, epochs=1, shuffle=False, verbose=0)
    # Adam divides by the root of its second moment, which magnifies the float-order
    # differences of tiny gradients: 1e-4 there.
    for prefix, model, rtol in (("served_emb", emb, 1e-5), ("served_adam", conv, 1e-4)):
        for rank in (0, 1):
            mine = saved_weights(saved[rank], prefix)
            assert len(mine) == len(model.get_weights()), prefix
            for i, (got, want) in enumerate(zip(mine, model.get_weights())):
                np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6,
                                           err_msg=f"{prefix}, rank {rank}, weight {i}")
    assert results[0].stderr.count("plan: the servers run ") == 2, results[0].stderr[-3000:]

"""Checks run by plan_worker.py for test_plan_auto.py (2 workers, 1 server), after its
own: DistributedOptimizer(plan="auto") on a model with an Embedding. The plan gathers
the embedding's rows (2 workers), and the bytes this worker sends its peer per step are
the planner's predicted gather; pinned to "sum" the same gradient is summed dense (no
peer bytes) and trains the same weights. Each worker saves both results to
$TFPS_TEST_OUT/rank<r>.npz."""

import keras
import numpy as np

from sfb_train_worker import save
from tf_ps_ops.plan import cost
from tf_ps_ops.plan.monitor import PlanMonitor

NUM_WORKERS, BATCH, STEPS, LOOKUPS, ROWS, WIDTH = 2, 8, 4, 6, 500, 16


def data(examples):
    rng = np.random.default_rng(7)
    ids = rng.integers(0, ROWS, size=(examples, LOOKUPS)).astype(np.int32)
    return ids, rng.standard_normal((examples, 1)).astype(np.float32)


def embedding_model():
    keras.utils.set_random_seed(5)
    ids = keras.Input((LOOKUPS,), dtype="int32")
    x = keras.layers.Embedding(ROWS, WIDTH, name="table")(ids)
    return keras.Model(ids, keras.layers.Dense(1, name="out")(keras.layers.Flatten()(x)))


def shard(array, rank):
    batches = array.reshape(STEPS, NUM_WORKERS, BATCH, *array.shape[1:])
    return batches[:, rank].reshape(STEPS * BATCH, *array.shape[1:])


def _train(hvd, pins):
    x, y = data(STEPS * NUM_WORKERS * BATCH)
    model = embedding_model()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), plan="auto", plan_pins=pins)
    monitor = PlanMonitor(every=STEPS)
    model.compile(optimizer=opt, loss="mse", jit_compile=False)
    model.fit(shard(x, hvd.rank()), shard(y, hvd.rank()), batch_size=BATCH, epochs=1,
              shuffle=False, verbose=0, callbacks=[monitor])
    assert int(opt.iterations) == STEPS and len(monitor.reports) == 1, monitor.reports
    return model, opt.tfps_plan, monitor.reports[0], opt._tfps_plan.machine


def check_embedding_gathered_as_predicted(hvd):
    model, plan, report, machine = _train(hvd, None)
    # The plan priced every worker's gathered rows at SGD's measured update of a row of
    # this table's width (rank 0's price: both ranks save it).
    assert machine.apply_row_width == WIDTH and machine.apply_per_row > 0, machine
    index = next(i for i, layer in enumerate(plan.layers) if layer.sparse)
    layer, choice = plan.layers[index], plan.choices[index]
    assert str(choice) == "gather" and layer.table == (ROWS, WIDTH), (layer, choice)
    assert layer.rows_per_step(plan.batch_size) == BATCH * LOOKUPS, layer  # measured
    predicted = cost.layer_cost(layer, choice, plan.cluster, cost.FREE, plan.batch_size,
                                plan.settings.partition_bytes).link_bytes
    # The one peer gets this worker's rows and int32 ids every step, and nothing else.
    assert report["peer_bytes"] == predicted == BATCH * LOOKUPS * (4 * WIDTH + 4), (
        report, predicted)
    save(apply_per_row=np.array(machine.apply_per_row),
         **{f"gather.{i}": w for i, w in enumerate(model.get_weights())})


def check_embedding_summed_dense_when_pinned(hvd):
    model, plan, report, _ = _train(hvd, {"table/embeddings": "sum"})
    assert [str(c) for layer, c in zip(plan.layers, plan.choices) if layer.sparse] == ["sum"]
    assert report["peer_bytes"] == 0, report
    assert report["server_bytes"] >= ROWS * WIDTH * 4, report
    save(**{f"dense.{i}": w for i, w in enumerate(model.get_weights())})


def check_embedding_planned_in_an_autograph_step(hvd):
    """The same plan in a step of the script's own (tf.function with autograph on, as a
    custom training loop has it; Keras' fit does not convert): the update of the gathered
    rows is timed while that step is traced, and the step trains."""
    import tensorflow as tf

    x, y = data(STEPS * NUM_WORKERS * BATCH)
    x, y = shard(x, hvd.rank()), shard(y, hvd.rank())
    model = embedding_model()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), plan="auto")

    @tf.function
    def step(ids, target):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(ids, training=True) - target))
        opt.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        return loss

    losses = [float(step(x[i:i + BATCH], y[i:i + BATCH])) for i in range(0, len(x), BATCH)]
    assert len(losses) == STEPS and all(np.isfinite(losses)), losses
    machine = opt._tfps_plan.machine
    assert machine.apply_row_width == WIDTH and machine.apply_per_row > 0, machine

"""Checks run by plan_worker.py for test_plan_auto.py (2 workers, 1 server), after its
own: DistributedOptimizer(plan="auto") puts gradients in PS mode (pinned here, so the
choice does not depend on the measured costs) and the servers run the Keras optimizer's
update for them: an Embedding's rows under plain SGD (the sparse PS update) with the rest
planned, and a conv kernel under Adam. An optimizer whose update the servers cannot run
(clipnorm acts on the local gradient) refuses a 'ps' pin with the reason. Each worker
saves the weights to $TFPS_TEST_OUT/rank<r>.npz; the test compares them with
single-process training."""

import os
from unittest import mock

import keras

from plan_sparse_worker import BATCH, STEPS, data, embedding_model, shard
from sfb_train_worker import conv_model, images, save

SGD_RATE, ADAM_RATE = 0.1, 0.01


def _fit(hvd, model, optimizer, x, y):
    model.compile(optimizer=optimizer, loss="mse", jit_compile=False)
    model.fit(shard(x, hvd.rank()), shard(y, hvd.rank()), batch_size=BATCH, epochs=1,
              shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    assert int(optimizer.iterations) == STEPS


def _distributed(hvd, optimizer, pins):
    with mock.patch.dict(os.environ, {"TFPS_PLAN_MODES": "sum,ps"}):
        return hvd.DistributedOptimizer(optimizer, plan="auto", plan_pins=pins)


def _choices(plan):
    return {layer.name.split(".", 1)[1]: str(c) for layer, c in zip(plan.layers, plan.choices)}


def check_pinned_gradients_train_on_servers(hvd):
    x, y = data(STEPS * 2 * BATCH)
    model = embedding_model()
    opt = _distributed(hvd, keras.optimizers.SGD(SGD_RATE),
                       {"table/embeddings": "ps", "out/kernel": "ps"})
    _fit(hvd, model, opt, x, y)
    choices = _choices(opt.tfps_plan)
    assert choices["table/embeddings"] == choices["out/kernel"] == "ps", choices
    assert len(opt._tfps_served) == sum(c == "ps" for c in choices.values()) >= 2, choices
    save(**{f"served_emb.{i}": w for i, w in enumerate(model.get_weights())})

    images_x, images_y = images(STEPS * 2 * BATCH, seed=13)
    model = conv_model(seed=13)
    opt = _distributed(hvd, keras.optimizers.Adam(ADAM_RATE), {"conv/kernel": "ps"})
    _fit(hvd, model, opt, images_x, images_y)
    assert _choices(opt.tfps_plan)["conv/kernel"] == "ps", opt.tfps_plan.choices
    save(**{f"served_adam.{i}": w for i, w in enumerate(model.get_weights())})


def check_ps_pin_refused_where_the_servers_cannot_update(hvd):
    x, y = data(STEPS * 2 * BATCH)
    model = embedding_model()
    opt = _distributed(hvd, keras.optimizers.SGD(0.1, clipnorm=1.0), {"out/kernel": "ps"})
    try:
        _fit(hvd, model, opt, x, y)
    except ValueError as error:
        message = str(error)
    else:
        raise AssertionError("a 'ps' pin with clipnorm trained")
    assert "'ps' is not possible here: clipnorm would act on the local copy only" in \
        message, message

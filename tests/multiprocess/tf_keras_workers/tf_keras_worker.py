"""Worker for test_tf_keras.py (2 workers, 1 server): tf_keras (Keras 2) models and
optimizers through Horovod's Keras API, each against single-process TensorFlow on the
same data.

TFPS_TEST_KERAS says which tf_keras: "tf.keras" (the job sets TF_USE_LEGACY_KERAS=1
before TensorFlow is imported, so tf.keras is tf_keras) or "tf_keras" (the package
imported directly while tf.keras is Keras 3).

Data: rank r's k-th batch is rows [k*2B + r*B, k*2B + (r+1)*B) of one global array, so
the average over workers of each worker's mean-loss gradient is the mean-loss gradient of
the concatenated batch, which the oracle (plain tf_keras, one process) trains on.
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workers"))
from harness import run_checks  # noqa: E402

import tensorflow as tf  # noqa: E402

if os.environ["TFPS_TEST_KERAS"] == "tf.keras":
    K = tf.keras
    assert K.__name__.startswith("tf_keras"), f"tf.keras is {K.__name__}, not tf_keras"
else:
    import tf_keras as K
    assert not tf.keras.__name__.startswith("tf_keras"), "tf.keras should be Keras 3 here"

import tf_ps_ops.keras as hvd  # noqa: E402
from tf_ps_ops.training.keras_optimizer import TfKerasMixin  # noqa: E402

WORKERS, BATCH, FEATURES, UNITS, STEPS = 2, 4, 3, 2, 6
TMP = os.environ["TFPS_TEST_OUT"]


def data(steps=STEPS, seed=7):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(steps * WORKERS * BATCH, FEATURES)).astype(np.float32)
    y = (x @ rng.normal(size=(FEATURES, UNITS)) + 0.3).astype(np.float32)
    return x, y


def shard(array, rank, batch=BATCH):
    rows = array.reshape(-1, WORKERS, batch, *array.shape[1:])[:, rank]
    return rows.reshape(-1, *array.shape[1:])


def initial(rank=0):
    kernel = (np.arange(FEATURES * UNITS, dtype=np.float32).reshape(FEATURES, UNITS) / 10
              + rank)
    return [kernel, np.full(UNITS, 0.1 * rank, np.float32)]


def model(rank=0, name=None):
    m = K.Sequential([K.layers.Dense(UNITS, input_shape=(FEATURES,), name=name)])
    m.set_weights(initial(rank))
    return m


def oracle_fit(make_optimizer, x, y, rows=WORKERS * BATCH, epochs=1, start=0):
    """Single-process tf_keras: `fit` on the concatenated batches of `rows` rows."""
    m = model(start)
    m.compile(optimizer=make_optimizer(), loss="mse")
    m.fit(x, y, batch_size=rows, epochs=epochs, shuffle=False, verbose=0)
    return m


def assert_close(got_model, want_model, what, rtol=1e-5, atol=1e-6):
    for got, want in zip(got_model.get_weights(), want_model.get_weights()):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)
    mine = np.concatenate([w.ravel() for w in got_model.get_weights()])
    everyone = hvd.allgather(mine[None], name=f"replicas.{what}").numpy()
    np.testing.assert_array_equal(everyone[0], everyone[-1], err_msg=f"{what}: replicas differ")


def fit(m, x, y, epochs=1, callbacks=(), batch=BATCH):
    return m.fit(shard(x, hvd.rank(), batch), shard(y, hvd.rank(), batch), batch_size=batch,
                 epochs=epochs, shuffle=False, verbose=0, callbacks=list(callbacks))


OPTIMIZERS = {
    "sgd_momentum": lambda: K.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
    "adam": lambda: K.optimizers.Adam(0.01),
    "legacy_sgd_momentum": lambda: K.optimizers.legacy.SGD(0.05, momentum=0.9),
    "legacy_adam": lambda: K.optimizers.legacy.Adam(0.01),
}


def check_fit_matches_single_process(_):
    x, y = data()
    for name in ("sgd_momentum", "legacy_adam"):
        make = OPTIMIZERS[name]
        opt = hvd.DistributedOptimizer(make())
        assert isinstance(opt, type(make())), type(opt).__mro__
        m = model()
        m.compile(optimizer=opt, loss="mse")
        fit(m, x, y)
        assert_close(m, oracle_fit(make, x, y), f"fit {name}")


def check_custom_loop_apply_gradients(_):
    x, y = data()
    xs, ys = shard(x, hvd.rank()), shard(y, hvd.rank())
    for name, traced in (("adam", True), ("legacy_sgd_momentum", False)):
        m = model()
        opt = hvd.DistributedOptimizer(OPTIMIZERS[name]())

        def step(xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(m(xb) - yb))
            grads = tape.gradient(loss, m.trainable_variables)
            opt.apply_gradients(zip(grads, m.trainable_variables))

        step = tf.function(step) if traced else step
        for k in range(STEPS):
            step(xs[k * BATCH:(k + 1) * BATCH], ys[k * BATCH:(k + 1) * BATCH])
        assert_close(m, oracle_fit(OPTIMIZERS[name], x, y), f"loop {name} traced={traced}")


def check_backward_passes_per_step(_):
    # Every 2 passes, one update from the passes' summed gradients / 2, averaged over the
    # workers: the gradient of the mean loss over the 2 * WORKERS batches.
    x, y = data(steps=STEPS)
    for name in ("sgd_momentum", "legacy_sgd_momentum"):
        m = model()
        m.compile(optimizer=hvd.DistributedOptimizer(
            OPTIMIZERS[name](), backward_passes_per_step=2, average_aggregated_gradients=True),
            loss="mse")
        fit(m, x, y)
        # The oracle's batch k: passes 2k and 2k+1 of every worker.
        passes = x.reshape(STEPS // 2, 2, WORKERS, BATCH, FEATURES).transpose(0, 2, 1, 3, 4)
        targets = y.reshape(STEPS // 2, 2, WORKERS, BATCH, UNITS).transpose(0, 2, 1, 3, 4)
        want = oracle_fit(OPTIMIZERS[name], passes.reshape(-1, FEATURES),
                          targets.reshape(-1, UNITS), rows=2 * WORKERS * BATCH)
        assert_close(m, want, f"backward_passes_per_step=2 {name}")
        assert int(m.optimizer.iterations) == STEPS, int(m.optimizer.iterations)


def check_compression_op_and_scaling(_):
    x, y = data()
    cases = [("fp16", dict(compression=hvd.Compression.fp16), 0.05, dict(rtol=2e-3, atol=2e-3)),
             ("sum", dict(op=hvd.Sum), 0.05 * WORKERS, {}),  # the sum is WORKERS x the mean
             ("predivide", dict(gradient_predivide_factor=2.0), 0.05, {})]
    for name, options, oracle_lr, tolerance in cases:
        m = model()
        m.compile(optimizer=hvd.DistributedOptimizer(K.optimizers.SGD(0.05), **options),
                  loss="mse")
        fit(m, x, y)
        assert_close(m, oracle_fit(lambda: K.optimizers.SGD(oracle_lr), x, y), name,
                     **tolerance)


def check_process_sets(_):
    # One set per worker: each averages over itself only, so trains on its own data.
    sets = [hvd.add_process_set([0]), hvd.add_process_set([1])]
    x, y = data()
    m = model()
    m.compile(optimizer=hvd.DistributedOptimizer(
        K.optimizers.legacy.SGD(0.05), process_set=sets[hvd.rank()]), loss="mse")
    fit(m, x, y)
    want = oracle_fit(lambda: K.optimizers.legacy.SGD(0.05), shard(x, hvd.rank()),
                      shard(y, hvd.rank()), rows=BATCH)
    for got, expected in zip(m.get_weights(), want.get_weights()):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def check_local_variables(_):
    # PartialDistributedOptimizer's local layer and register_local_var: those gradients
    # stay the worker's own, divided by size() (Horovod's scale_local_gradients).
    x, y = data()
    for how in ("partial", "register"):
        m = K.Sequential([K.layers.Dense(UNITS, input_shape=(FEATURES,), name=f"{how}_a"),
                          K.layers.Dense(UNITS, name=f"{how}_b")])
        m.set_weights([w * 0 + 0.1 * (i + 1) for i, w in enumerate(m.get_weights())])
        start = m.get_weights()
        if how == "partial":
            opt = hvd.PartialDistributedOptimizer(K.optimizers.legacy.SGD(0.05),
                                                  local_layers=m.layers[1])
        else:
            opt = hvd.DistributedOptimizer(K.optimizers.SGD(0.05))
            for variable in m.layers[1].weights:
                opt.register_local_var(variable)
        m.compile(optimizer=opt, loss="mse")
        fit(m, x, y)
        # Every worker's replica: the shared layer is one, the local layer one per worker.
        shared = [tf.Variable(w) for w in start[:2]]
        local = [[tf.Variable(w) for w in start[2:]] for _ in range(WORKERS)]
        for k in range(STEPS):
            shared_grads, local_grads = [], []
            for r in range(WORKERS):
                xb = shard(x, r)[k * BATCH:(k + 1) * BATCH]
                yb = shard(y, r)[k * BATCH:(k + 1) * BATCH]
                with tf.GradientTape() as tape:
                    out = (xb @ shared[0] + shared[1]) @ local[r][0] + local[r][1]
                    loss = tf.reduce_mean(tf.square(out - yb))
                grads = tape.gradient(loss, shared + local[r])
                shared_grads.append(grads[:2])
                local_grads.append(grads[2:])
            for i, variable in enumerate(shared):
                variable.assign_sub(0.05 * sum(g[i] for g in shared_grads) / WORKERS)
            for r in range(WORKERS):
                for variable, grad in zip(local[r], local_grads[r]):
                    variable.assign_sub(0.05 * grad / WORKERS)
        want = shared + local[hvd.rank()]
        for got, expected in zip(m.get_weights(), want):
            np.testing.assert_allclose(got, expected.numpy(), rtol=1e-5, atol=1e-6,
                                       err_msg=how)


class _RawLoss(K.callbacks.Callback):
    """Records each epoch's loss before MetricAverageCallback averages it."""

    def __init__(self):
        super().__init__()
        self.losses = []

    def on_epoch_end(self, epoch, logs=None):
        self.losses.append(logs["loss"])


class _EpochWeights(K.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.weights = []

    def on_epoch_end(self, epoch, logs=None):
        self.weights.append(self.model.get_weights())


def check_callbacks(_):
    x, y = data()
    m = model(rank=hvd.rank())  # different on every worker: the broadcast makes them equal
    m.compile(optimizer=hvd.DistributedOptimizer(K.optimizers.legacy.SGD(0.05, momentum=0.9)),
              loss="mse")
    raw = _RawLoss()
    warmup = hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.05, warmup_epochs=2,
                                                      steps_per_epoch=STEPS)
    best = hvd.callbacks.BestModelCheckpoint(monitor="loss", filepath=os.path.join(
        TMP, f"best{hvd.rank()}.h5"))
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0), raw,
                 hvd.callbacks.MetricAverageCallback(), warmup, best]
    weights = _EpochWeights()
    history = fit(m, x, y, epochs=3, callbacks=callbacks + [weights])
    for callback in callbacks:  # each became a tf_keras callback when fit gave it the model
        assert isinstance(callback, K.callbacks.Callback), type(callback).__mro__
    # Averaged losses: the mean of the workers' own.
    raw_all = hvd.allgather(np.array([raw.losses])).numpy()
    np.testing.assert_allclose(history.history["loss"], raw_all.mean(axis=0), rtol=1e-6)
    # Warmup (Horovod's): lr / size() ramping to lr over 2 epochs, per batch; momentum is
    # scaled by new_lr / old_lr for one batch after each change and restored.
    size = hvd.size()
    expected = [0.05 / size * ((e + 1) * (size - 1) / 2 + 1) for e in range(2)] + [0.05]
    np.testing.assert_allclose(history.history["lr"], expected, rtol=1e-6)
    assert abs(float(m.optimizer.momentum) - 0.9) < 1e-7, float(m.optimizer.momentum)
    # The oracle: rank 0's weights, the same per-batch lr and momentum sequence.
    want = model(0)
    opt = K.optimizers.legacy.SGD(0.05, momentum=0.9)
    xs = x.reshape(STEPS, WORKERS * BATCH, FEATURES)
    ys = y.reshape(STEPS, WORKERS * BATCH, UNITS)
    old_lr = 0.05
    for epoch in range(3):
        for k in range(STEPS):
            lr = 0.05 if epoch >= 2 else \
                0.05 / size * ((epoch + (k + 1) / STEPS) * (size - 1) / 2 + 1)
            opt.learning_rate = lr
            opt.momentum = 0.9 * lr / old_lr if epoch < 2 else 0.9
            old_lr = lr
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(want(xs[k]) - ys[k]))
            opt.apply_gradients(zip(tape.gradient(loss, want.trainable_variables),
                                    want.trainable_variables))
    assert_close(m, want, "callbacks")
    # BestModelCheckpoint kept the model of the epoch with the lowest (averaged) loss;
    # load_model restores it with a distributed optimizer.
    loaded = hvd.load_model(os.path.join(TMP, f"best{hvd.rank()}.h5"))
    assert type(loaded).__module__.startswith("tf_keras"), type(loaded)
    assert isinstance(loaded.optimizer, TfKerasMixin)
    best_epoch = int(np.argmin(history.history["loss"]))
    for got, expected in zip(loaded.get_weights(), weights.weights[best_epoch]):
        np.testing.assert_array_equal(got, expected)


def check_load_model(_):
    x, y = data()
    for name, suffix in (("adam", ".keras"), ("legacy_sgd_momentum", ".h5")):
        m = model()
        m.compile(optimizer=hvd.DistributedOptimizer(OPTIMIZERS[name]()), loss="mse")
        fit(m, x[:WORKERS * BATCH * 2], y[:WORKERS * BATCH * 2])
        path = os.path.join(TMP, f"{name}{hvd.rank()}{suffix}")
        m.save(path)
        loaded = hvd.load_model(path, compression=hvd.Compression.fp16)
        assert isinstance(loaded.optimizer, TfKerasMixin), \
            type(loaded.optimizer).__mro__
        assert loaded.optimizer._tfps_compression is hvd.Compression.fp16
        # Training on: the loaded one averages too (fp16: the tolerance).
        loaded.optimizer._tfps_compression = hvd.Compression.none
        fit(m, x[WORKERS * BATCH * 2:], y[WORKERS * BATCH * 2:])
        fit(loaded, x[WORKERS * BATCH * 2:], y[WORKERS * BATCH * 2:])
        assert_close(loaded, m, f"load_model {name}{suffix}")


def check_elastic_state(_):
    x, y = data()
    m = model(rank=hvd.rank())
    opt = hvd.DistributedOptimizer(K.optimizers.legacy.SGD(0.05, momentum=0.9))
    m.compile(optimizer=opt, loss="mse")
    fit(m, x[:WORKERS * BATCH], y[:WORKERS * BATCH])  # builds the slots
    state = hvd.elastic.TensorFlowKerasState(m, opt, epoch=0, batch=0)
    assert hvd.elastic.KerasState is hvd.elastic.TensorFlowKerasState
    state.sync()  # rank 0's weights and slots everywhere
    synced = [v.numpy() for v in state._variables()]
    everyone = hvd.allgather(np.concatenate([v.ravel() for v in synced])[None]).numpy()
    np.testing.assert_array_equal(everyone[0], everyone[1])
    assert len(synced) == len(m.variables) + len(opt.variables()) > len(m.variables)
    state.epoch = 3
    state.commit()
    fit(m, x, y)
    state.epoch = 4
    state.restore()
    for got, expected in zip(state._variables(), synced):
        np.testing.assert_array_equal(got.numpy(), expected)
    assert state.epoch == 3
    # The elastic callbacks turn tf_keras ones under fit and count batches and epochs.
    callbacks = [hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=2)]
    fit(m, x, y, epochs=2, callbacks=callbacks)
    assert all(isinstance(c, K.callbacks.Callback) for c in callbacks)
    assert (state.epoch, state.batch) == (5, 0), (state.epoch, state.batch)
    state.restore()  # the last commit (the end of the last epoch) is the current state
    for got, variable in zip(state._variables(), m.variables + opt.variables()):
        np.testing.assert_array_equal(got.numpy(), variable.numpy())


def check_ps_mode_optimizers(_):
    from tf_ps_ops import optimizers as ps_optimizers

    x, y = data()
    for name, ps, stock in (
            ("sgd", lambda: ps_optimizers.tf_keras.SGD(0.05, momentum=0.9, nesterov=True),
             lambda: K.optimizers.SGD(0.05, momentum=0.9, nesterov=True)),
            ("adam", lambda: ps_optimizers.tf_keras.Adam(0.01), lambda: K.optimizers.Adam(0.01)),
            ("rmsprop", lambda: ps_optimizers.tf_keras.RMSprop(0.01, momentum=0.5, centered=True),
             lambda: K.optimizers.RMSprop(0.01, momentum=0.5, centered=True))):
        m = model(rank=hvd.rank(), name=f"ps_{name}")  # build() adopts rank 0's weights
        m.compile(optimizer=ps(), loss="mse")
        fit(m, x, y)
        assert_close(m, oracle_fit(stock, x, y), f"PS mode {name}")
    try:
        ps_optimizers.SGD(0.1).build(model().trainable_variables)
        raise AssertionError("the Keras 3 PS optimizer took tf_keras variables")
    except TypeError as e:
        assert "tf_ps_ops.optimizers.tf_keras.SGD" in str(e), e


def check_sfb_convert(_):
    import sfb

    x, y = data()
    base = K.Sequential([K.Input((FEATURES,)), K.layers.Dense(8, activation="tanh"),
                         K.layers.Dense(UNITS)])
    base.set_weights([np.linspace(-1, 1, w.size, dtype=np.float32).reshape(w.shape)
                      for w in base.get_weights()])
    converted = sfb.convert(base, mode="sfb")
    assert type(converted).__module__.startswith("tf_keras")
    kernels = [layer.kernel for layer in converted.layers]
    assert all(sfb.is_sfb_variable(k) for k in kernels), [type(la) for la in converted.layers]
    converted.compile(optimizer=hvd.DistributedOptimizer(K.optimizers.SGD(0.05)), loss="mse")
    fit(converted, x, y)
    want = K.models.clone_model(base)
    want.set_weights(base.get_weights())
    want.compile(optimizer=K.optimizers.SGD(0.05), loss="mse")
    want.fit(x, y, batch_size=WORKERS * BATCH, shuffle=False, verbose=0)
    assert_close(converted, want, "sfb.convert")


CHECKS = [check_fit_matches_single_process, check_custom_loop_apply_gradients,
          check_backward_passes_per_step, check_compression_op_and_scaling, check_process_sets,
          check_local_variables, check_callbacks, check_load_model, check_elastic_state, check_ps_mode_optimizers,
          check_sfb_convert]



def _timed(check):
    def timed(hvd_):
        start = time.monotonic()
        try:
            return check(hvd_)
        finally:
            print(f"{check.__name__}: {time.monotonic() - start:.1f} s", file=sys.stderr)

    timed.__name__ = check.__name__
    return timed


def main(checks):
    run_checks([_timed(check) for check in checks])


if __name__ == "__main__":
    main(CHECKS)

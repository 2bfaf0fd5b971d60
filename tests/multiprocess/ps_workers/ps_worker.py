"""PS mode on every path, checked against stock TensorFlow on the averaged gradient.

Run on 1 worker (exact to rtol 1e-6) and on 3 workers (replicas bit-identical, rtol 1e-5).
Each worker starts from different random weights: rank 0's travel to the servers on the
first step, so all replicas train from the same start. The oracle, computed inside every
worker, runs the stock optimizer on the mean of all shards' gradients.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workers"))
import harness  # noqa: E402

import numpy as np  # noqa: E402

STEPS = 12
DIM_IN, DIM_OUT, ROWS = 6, 3, 8  # ROWS per worker


def data(size):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((ROWS * size, DIM_IN)).astype(np.float32)
    y = rng.standard_normal((ROWS * size, DIM_OUT)).astype(np.float32)
    return x, y


def shard(array, rank):
    return array[rank * ROWS:(rank + 1) * ROWS]


def tolerance(hvd, keras3=False):
    """1e-6 against TF's own kernels on 1 worker. 1e-5 with several workers (the servers
    sum in arrival order) and against Keras 3 optimizers, which round their constants
    differently from TF's kernels (Keras casts 1 - beta computed in float64 to float32;
    ResourceApplyAdam computes 1 - float32(beta)): a ~1e-7 difference per step."""
    return 1e-6 if hvd.size() == 1 and not keras3 else 1e-5


def assert_close(actual, desired, hvd, what, keras3=False):
    desired = np.asarray(desired)
    scale = float(np.max(np.abs(desired))) or 1.0
    rtol = tolerance(hvd, keras3)
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=rtol * scale, err_msg=what)


def assert_replicas_identical(hvd, arrays, what):
    import tensorflow as tf
    flat = np.concatenate([np.ravel(a) for a in arrays]).astype(np.float64)
    everyone = hvd.allgather(tf.constant(flat[None, :]), name="replicas." + what).numpy()
    for rank in range(hvd.size()):
        assert np.array_equal(everyone[rank], everyone[0]), f"{what}: rank {rank} differs"


def keras_model(seed):
    import keras
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((DIM_IN,)), keras.layers.Dense(5, activation="tanh"),
                              keras.layers.Dense(DIM_OUT)])
    return model


def check_keras_optimizers_match_stock(hvd):
    import keras
    import tensorflow as tf
    from tf_ps_ops import optimizers as ps_optimizers
    cases = [("SGD", dict(learning_rate=0.1)),
             ("SGD", dict(learning_rate=0.05, momentum=0.9, nesterov=True)),
             ("Adam", dict(learning_rate=0.01)), ("Adam", dict(learning_rate=0.01, amsgrad=True)),
             ("Adagrad", dict(learning_rate=0.1)), ("RMSprop", dict(learning_rate=0.01)),
             ("RMSprop", dict(learning_rate=0.01, momentum=0.5, centered=True))]
    x, y = data(hvd.size())
    for name, kwargs in cases:
        model = keras_model(seed=100 + hvd.rank())  # different start on every rank
        oracle = keras_model(seed=100)  # rank 0's start
        ps_opt = getattr(ps_optimizers, name)(**kwargs)
        ps_opt.build(model.trainable_variables)  # adopts rank 0's weights
        stock = getattr(keras.optimizers, name)(**kwargs)
        for _ in range(STEPS):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(shard(x, hvd.rank())) - shard(y, hvd.rank())) ** 2)
            ps_opt.apply(tape.gradient(loss, model.trainable_variables),
                         model.trainable_variables)
            grads = []
            for r in range(hvd.size()):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean((oracle(shard(x, r)) - shard(y, r)) ** 2)
                grads.append(tape.gradient(loss, oracle.trainable_variables))
            mean = [tf.add_n(list(g)) / hvd.size() for g in zip(*grads)]
            stock.apply(mean, oracle.trainable_variables)
        for got, want in zip(model.trainable_variables, oracle.trainable_variables):
            assert_close(got.numpy(), want.numpy(), hvd, f"{name} {kwargs} {got.path}",
                         keras3=True)
        assert_replicas_identical(hvd, [v.numpy() for v in model.trainable_variables],
                                  f"{name}{len(kwargs)}")


def _v1_train(hvd, make_optimizer, scope, rewrite, as_function):
    """Trains w (DIM_IN x DIM_OUT) with a v1 optimizer; returns (weights, update op types)."""
    import tensorflow as tf
    import tf_ps_ops.ps_mode as ps_mode
    x, y = data(hvd.size())
    init = np.random.default_rng(hvd.rank() + 5 if rewrite else 5).standard_normal(
        (DIM_IN, DIM_OUT)).astype(np.float32)
    (ps_mode.enable_graph_rewrite if rewrite else ps_mode.disable_graph_rewrite)()
    try:
        if as_function:
            w = tf.Variable(init, name=scope + "_w")
            opt = make_optimizer()
            if rewrite:
                ps_mode.initialize_variables([w])

            def loss_of(xs, ys):
                return tf.reduce_mean((tf.matmul(xs, w) - ys) ** 2)

            @tf.function
            def step():
                if rewrite:
                    with tf.GradientTape() as tape:
                        loss = loss_of(shard(x, hvd.rank()), shard(y, hvd.rank()))
                    grad = tape.gradient(loss, w)
                else:
                    grads = []
                    for r in range(hvd.size()):
                        with tf.GradientTape() as tape:
                            loss = loss_of(shard(x, r), shard(y, r))
                        grads.append(tape.gradient(loss, w))
                    grad = tf.add_n(grads) / hvd.size()
                opt.apply_gradients([(grad, w)])

            for _ in range(STEPS):
                step()
            types = {op.type for op in step.get_concrete_function().graph.get_operations()}
            return w.numpy(), types
        graph = tf.Graph()
        with graph.as_default():
            w = tf.compat.v1.get_variable(scope + "_w", initializer=init, use_resource=True)
            if rewrite:
                loss = tf.reduce_mean((tf.matmul(shard(x, hvd.rank()), w) - shard(y, hvd.rank())) ** 2)
                grad = tf.gradients(loss, [w])[0]
            else:
                grad = tf.add_n([tf.gradients(tf.reduce_mean((tf.matmul(shard(x, r), w)
                                                              - shard(y, r)) ** 2), [w])[0]
                                 for r in range(hvd.size())]) / hvd.size()
            train = make_optimizer().apply_gradients([(grad, w)])
            types = {op.type for op in graph.get_operations()}
            start = ps_mode.initialize_variables([w]) if rewrite else tf.no_op()
            with tf.compat.v1.Session(graph=graph) as session:
                session.run(tf.compat.v1.global_variables_initializer())
                session.run(start)
                for _ in range(STEPS):
                    session.run(train)
                return session.run(w), types
    finally:
        ps_mode.disable_graph_rewrite()


V1_OPTIMIZERS = [
    ("gd", lambda tf: tf.compat.v1.train.GradientDescentOptimizer(0.1), "PsApplyGradientDescent"),
    ("momentum", lambda tf: tf.compat.v1.train.MomentumOptimizer(0.05, 0.9, use_nesterov=True),
     "PsApplyMomentum"),
    ("adam", lambda tf: tf.compat.v1.train.AdamOptimizer(0.01), "PsApplyAdam"),
    ("adagrad", lambda tf: tf.compat.v1.train.AdagradOptimizer(0.1), "PsApplyAdagrad"),
    ("rmsprop", lambda tf: tf.compat.v1.train.RMSPropOptimizer(0.01, momentum=0.3),
     "PsApplyRMSProp"),
]


def _check_v1(hvd, as_function):
    import tensorflow as tf
    for name, make, ps_op in V1_OPTIMIZERS:
        scope = f"v1_{name}_{'fn' if as_function else 'session'}"
        got, types = _v1_train(hvd, lambda: make(tf), scope, True, as_function)
        assert ps_op in types, f"{name}: no {ps_op} in {sorted(types)}"
        assert not any(t.startswith("ResourceApply") for t in types), sorted(types)
        want, stock_types = _v1_train(hvd, lambda: make(tf), scope + "_oracle", False, as_function)
        assert ps_op not in stock_types
        assert_close(got, want, hvd, f"v1 {name}")
        assert_replicas_identical(hvd, [got], scope)


def check_v1_optimizers_in_a_session(hvd):
    _check_v1(hvd, as_function=False)


def check_v1_optimizers_in_tf_function(hvd):
    _check_v1(hvd, as_function=True)


def check_tf_keras_legacy_optimizers(hvd):
    import tensorflow as tf
    import tf_keras
    import tf_ps_ops.ps_mode as ps_mode
    x, y = data(hvd.size())
    for name, make, ps_op in [
            ("sgd", lambda: tf_keras.optimizers.legacy.SGD(0.05, momentum=0.9),
             "PsApplyKerasMomentum"),
            ("adam", lambda: tf_keras.optimizers.legacy.Adam(0.01), "PsApplyAdam")]:
        results = []
        for rewrite in (True, False):
            tf_keras.utils.set_random_seed(11 + (hvd.rank() if rewrite else 0))
            model = tf_keras.Sequential([tf_keras.layers.Dense(DIM_OUT, input_shape=(DIM_IN,))],
                                        name=f"legacy_{name}_{rewrite}")
            opt = make()
            if rewrite:
                ps_mode.initialize_variables(model.trainable_variables)
            (ps_mode.enable_graph_rewrite if rewrite else ps_mode.disable_graph_rewrite)()
            try:
                @tf.function
                def step():
                    shards = [hvd.rank()] if rewrite else range(hvd.size())
                    grads = []
                    for r in shards:
                        with tf.GradientTape() as tape:
                            loss = tf.reduce_mean((model(shard(x, r)) - shard(y, r)) ** 2)
                        grads.append(tape.gradient(loss, model.trainable_variables))
                    mean = [tf.add_n(list(g)) / len(grads) for g in zip(*grads)]
                    opt.apply_gradients(zip(mean, model.trainable_variables))

                for _ in range(STEPS):
                    step()
                types = {op.type for op in step.get_concrete_function().graph.get_operations()}
                assert (ps_op in types) == rewrite, (name, rewrite, sorted(types))
            finally:
                ps_mode.disable_graph_rewrite()
            results.append([v.numpy() for v in model.trainable_variables])
        for got, want in zip(*results):
            assert_close(got, want, hvd, f"tf_keras legacy {name}")
        assert_replicas_identical(hvd, results[0], "legacy_" + name)


def check_rewrite_graph_def(hvd):
    import tensorflow as tf
    import tf_ps_ops.ps_mode as ps_mode
    x, y = data(hvd.size())
    init = np.random.default_rng(hvd.rank() + 21).standard_normal((DIM_IN, DIM_OUT)).astype(np.float32)
    graph = tf.Graph()
    with graph.as_default():  # a stock v1 training graph, as if loaded from disk
        w = tf.compat.v1.get_variable("graphdef_w", initializer=init, use_resource=True)
        loss = tf.reduce_mean((tf.matmul(shard(x, hvd.rank()), w) - shard(y, hvd.rank())) ** 2)
        tf.compat.v1.train.MomentumOptimizer(0.05, 0.9).minimize(loss, name="train")
        tf.compat.v1.variables_initializer(tf.compat.v1.global_variables(), name="init")
    rewritten = ps_mode.rewrite_graph_def(graph.as_graph_def())
    ops = {n.op for n in rewritten.node}
    assert "PsApplyMomentum" in ops and "ResourceApplyMomentum" not in ops, sorted(ops)
    with tf.Graph().as_default() as g2:
        tf.compat.v1.import_graph_def(rewritten, name="")
        start = ps_mode.initialize_variables([g2.get_tensor_by_name("graphdef_w:0")])
        with tf.compat.v1.Session(graph=g2) as session:
            session.run("init")
            session.run(start)
            for _ in range(STEPS):
                session.run("train")
            got = session.run("graphdef_w/Read/ReadVariableOp:0")
    # The oracle: stock Momentum from rank 0's start on the mean gradient of all shards.
    with tf.Graph().as_default() as g3:
        w = tf.compat.v1.get_variable(
            "w", initializer=np.random.default_rng(21).standard_normal((DIM_IN, DIM_OUT)).astype(np.float32),
            use_resource=True)
        grad = tf.add_n([tf.gradients(tf.reduce_mean((tf.matmul(shard(x, r), w) - shard(y, r)) ** 2),
                                      [w])[0] for r in range(hvd.size())]) / hvd.size()
        train = tf.compat.v1.train.MomentumOptimizer(0.05, 0.9).apply_gradients([(grad, w)])
        with tf.compat.v1.Session(graph=g3) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for _ in range(STEPS):
                session.run(train)
            want = session.run(w)
    assert_close(got, want, hvd, "rewrite_graph_def momentum")


def check_grappler_rewrite_in_a_session(hvd):
    """A stock v1 graph, swapped by the Grappler optimizer the op library registers."""
    import tensorflow as tf
    import tf_ps_ops.ps_mode as ps_mode
    x, y = data(hvd.size())
    init = np.random.default_rng(hvd.rank() + 31).standard_normal((DIM_IN, DIM_OUT)).astype(np.float32)
    graph = tf.Graph()
    with graph.as_default():
        w = tf.compat.v1.get_variable("grappler_w", initializer=init, use_resource=True)
        loss = tf.reduce_mean((tf.matmul(shard(x, hvd.rank()), w) - shard(y, hvd.rank())) ** 2)
        train = tf.compat.v1.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
        assert "ResourceApplyMomentum" in {op.type for op in graph.get_operations()}
        start = ps_mode.initialize_variables([w])
        config = tf.compat.v1.ConfigProto()
        config.graph_options.rewrite_options.custom_optimizers.add().name = "TfpsPsRewrite"
        with tf.compat.v1.Session(graph=graph, config=config) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(start)
            for _ in range(STEPS):
                session.run(train)
            got = session.run(w)
    with tf.Graph().as_default():  # the oracle: stock Momentum on the mean gradient
        w = tf.compat.v1.get_variable(
            "w", initializer=np.random.default_rng(31).standard_normal((DIM_IN, DIM_OUT)).astype(np.float32),
            use_resource=True)
        grad = tf.add_n([tf.gradients(tf.reduce_mean((tf.matmul(shard(x, r), w) - shard(y, r)) ** 2),
                                      [w])[0] for r in range(hvd.size())]) / hvd.size()
        train = tf.compat.v1.train.MomentumOptimizer(0.05, 0.9).apply_gradients([(grad, w)])
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for _ in range(STEPS):
                session.run(train)
            want = session.run(w)
    assert_close(got, want, hvd, "grappler momentum")
    assert_replicas_identical(hvd, [got], "grappler")


def check_keras_fit_with_ps_adam(hvd):
    import keras
    from tf_ps_ops import optimizers as ps_optimizers
    x, y = data(hvd.size())
    model = keras_model(seed=300 + hvd.rank())
    model.compile(optimizer=ps_optimizers.Adam(0.01), loss="mse", jit_compile=False)
    model.fit(shard(x, hvd.rank()), shard(y, hvd.rank()), batch_size=ROWS, epochs=STEPS,
              shuffle=False, verbose=0)
    oracle = keras_model(seed=300)
    oracle.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse", jit_compile=False)
    # One batch per epoch: the mean loss over the concatenated batch has the mean gradient.
    oracle.fit(x, y, batch_size=ROWS * hvd.size(), epochs=STEPS, shuffle=False, verbose=0)
    for got, want in zip(model.trainable_variables, oracle.trainable_variables):
        assert_close(got.numpy(), want.numpy(), hvd, "fit Adam " + got.path, keras3=True)
    assert_replicas_identical(hvd, [v.numpy() for v in model.trainable_variables], "fit_adam")


def check_env_flag_turns_the_rewrite_on(hvd):
    import tensorflow as tf
    import tf_ps_ops.ps_mode as ps_mode
    expected = os.environ.get("TFPS_GRAPH_REWRITE") == "1"
    assert ps_mode.graph_rewrite_enabled() == expected
    if expected:
        with tf.Graph().as_default() as graph:
            v = tf.compat.v1.get_variable("flag_v", initializer=[1.0, 2.0], use_resource=True)
            tf.compat.v1.train.GradientDescentOptimizer(0.1).apply_gradients([([1.0, 1.0], v)])
        assert "PsApplyGradientDescent" in {op.type for op in graph.get_operations()}
        ps_mode.disable_graph_rewrite()
        assert not ps_mode.graph_rewrite_enabled()


def check_unreadable_slot_is_a_clear_error(hvd):
    """A slot the kernel cannot read fails the op, naming the optimizer, the slot and the
    variable (it used to push 0.0 as the slot's initial value). No push happens, so every
    worker fails the same way on its own."""
    import tensorflow as tf
    from tf_ps_ops.common.library import ops
    w = tf.Variable(np.ones((DIM_IN, DIM_OUT), np.float32), name="slot_error_w")
    missing = tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[DIM_IN, DIM_OUT],
                                     shared_name="tfps_no_such_slot")  # never created
    try:
        ops().ps_apply_momentum(var=w.handle, accum=missing, lr=0.1, grad=tf.ones_like(w),
                                momentum=0.9, tensor_name="slot_error_w")
    except tf.errors.FailedPreconditionError as e:
        for part in ("PsApplyMomentum", "'slot_error_w'", "Momentum slot 'accum'"):
            assert part in e.message, (part, e.message)
    else:
        raise AssertionError("PsApplyMomentum ran with an unreadable slot")
    assert np.array_equal(w.numpy(), np.ones((DIM_IN, DIM_OUT), np.float32))


CHECKS = [check_unreadable_slot_is_a_clear_error, check_env_flag_turns_the_rewrite_on, check_keras_optimizers_match_stock, check_v1_optimizers_in_a_session,
          check_v1_optimizers_in_tf_function, check_tf_keras_legacy_optimizers,
          check_rewrite_graph_def, check_grappler_rewrite_in_a_session,
          check_keras_fit_with_ps_adam]

if __name__ == "__main__":
    harness.run_checks(CHECKS)

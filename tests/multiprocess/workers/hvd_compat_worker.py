"""Worker for test_hvd_compat.py: Horovod semantics that issue 12 found missing, each
checked against Horovod 0.28's own definition (gradients, scaling, v1 graph mode, Keras
callbacks). Every worker computes every other worker's input, so each checks the result.
"""

import keras
import numpy as np
import tensorflow as tf

from harness import run_checks


def check_broadcast_grad_is_averaged(hvd):
    # Horovod 0.28: the root's gradient is the *average* of the upstream gradients.
    size, me = hvd.size(), hvd.rank()
    x = tf.Variable(np.full(3, float(me), np.float32))

    def grad(root):
        with tf.GradientTape() as tape:
            y = hvd.broadcast(x, root_rank=root, name=f"bgrad.{root}")
            loss = tf.reduce_sum(y * float(me + 1))
        return tape.gradient(loss, x)

    average = sum(r + 1 for r in range(size)) / size
    for root in range(size):
        for g in (grad(root), tf.function(grad)(root)):
            np.testing.assert_allclose(g, np.full(3, average if me == root else 0.0), rtol=1e-6)


def check_allgather_grad(hvd):
    # Horovod 0.28: allreduce(upstream, Average), then this rank's rows; rows vary by rank.
    size, me = hvd.size(), hvd.rank()
    rows = [r + 2 for r in range(size)]
    for dtype in (tf.float32, tf.float64):
        x = tf.Variable(tf.ones((rows[me], 3), dtype) * me)

        def grad():
            with tf.GradientTape() as tape:
                gathered = hvd.allgather(x)
                # Each rank weighs the gathered rows differently: the average matters.
                upstream = tf.cast(tf.range(sum(rows)), dtype)[:, None] * float(me + 1)
                loss = tf.reduce_sum(gathered * upstream)
            return tape.gradient(loss, x)

        weights = np.arange(sum(rows), dtype=np.float64)[:, None] * \
            (sum(r + 1 for r in range(size)) / size)
        start = sum(rows[:me])
        expected = np.broadcast_to(weights[start:start + rows[me]], (rows[me], 3))
        for g in (grad(), tf.function(grad)()):
            assert g.dtype == dtype, g.dtype
            np.testing.assert_allclose(g, expected, rtol=1e-6)


def check_allgather_grad_in_v1_graph(hvd):
    size, me = hvd.size(), hvd.rank()
    rows = [r + 1 for r in range(size)]
    with tf.Graph().as_default():
        x = tf.ones((rows[me], 2)) * me
        gathered = hvd.allgather(x)
        grad = tf.gradients(gathered, x, tf.ones((sum(rows), 2)) * (me + 1))[0]
        with tf.compat.v1.Session() as session:
            value = session.run(grad)
    np.testing.assert_allclose(value, np.full((rows[me], 2), sum(range(1, size + 1)) / size))


def check_broadcast_inplace_in_v1_graph(hvd):
    size, me = hvd.size(), hvd.rank()
    with tf.Graph().as_default():
        first = tf.Variable(np.full((2, 2), me, np.float32))
        second = tf.Variable(np.arange(3) + 10 * me)
        returned = hvd.broadcast_([first, second], root_rank=size - 1)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            values = session.run(returned)
            np.testing.assert_array_equal(values[0], np.full((2, 2), size - 1))
            np.testing.assert_array_equal(values[1], np.arange(3) + 10 * (size - 1))
            np.testing.assert_array_equal(session.run(first), np.full((2, 2), size - 1))


def check_indexed_slices_gathered(hvd):
    # Horovod allgathers values and indices (and divides the values by size for Average),
    # with or without a dense_shape, which the result keeps; grouped_allreduce alike.
    size, me = hvd.size(), hvd.rank()
    values = [np.full((r + 1, 2), r + 1, np.float32) for r in range(size)]
    indices = [np.arange(r + 1, dtype=np.int64) + r for r in range(size)]
    slices = tf.IndexedSlices(tf.constant(values[me]), tf.constant(indices[me]))
    shaped = tf.IndexedSlices(slices.values, slices.indices, dense_shape=tf.constant([9, 2],
                                                                                     tf.int64))
    for op, divisor in ((hvd.Average, size), (hvd.Sum, 1)):
        for tensor in (slices, shaped):
            for reduced in (hvd.allreduce(tensor, op=op),
                            tf.function(lambda: hvd.allreduce(tensor, op=op))(),
                            hvd.grouped_allreduce([tensor], op=op)[0]):
                assert isinstance(reduced, tf.IndexedSlices), type(reduced)
                np.testing.assert_allclose(reduced.values, np.concatenate(values) / divisor)
                np.testing.assert_array_equal(reduced.indices, np.concatenate(indices))
                if tensor.dense_shape is None:
                    assert reduced.dense_shape is None
                else:
                    np.testing.assert_array_equal(reduced.dense_shape, [9, 2])
    # Horovod's NotImplementedError for what it does not serve on slices, raised on every
    # rank before anything travels, with or without a dense_shape.
    for bad in (slices, shaped):
        for kwargs in (dict(op=hvd.Max), dict(op=hvd.Min), dict(op=hvd.Product),
                       dict(op=hvd.Adasum), dict(prescale_factor=2.0),
                       dict(postscale_factor=0.5)):
            try:
                hvd.allreduce(bad, **kwargs)
            except NotImplementedError:
                continue
            raise AssertionError(f"allreduce(IndexedSlices, {kwargs}) did not raise")


def check_fp16_scaling_in_fp32(hvd):
    # Horovod on CPU scales float16 in float32: cast(factor * float32(x), float16).
    size = hvd.size()
    rng = np.random.default_rng(5)
    tensor = tf.constant(rng.uniform(-100, 100, 4000).astype(np.float16))  # same on all ranks
    factor = 0.1915194503788923
    summed = hvd.allreduce(tensor, op=hvd.Sum, prescale_factor=factor)
    scaled = tf.cast(tf.cast(tensor, tf.float32) * factor, tf.float16)
    np.testing.assert_array_equal(summed, scaled * size)
    summed = hvd.allreduce(tensor, op=hvd.Sum, postscale_factor=factor)
    expected = tf.cast(tf.cast(tensor * size, tf.float32) * factor, tf.float16)
    np.testing.assert_array_equal(summed, expected)


def check_objects_in_v1_graph(hvd):
    size, me = hvd.size(), hvd.rank()
    with tf.Graph().as_default():
        with tf.compat.v1.Session() as session:  # the default session
            got = hvd.broadcast_object({"from": me} if me == 1 else None, root_rank=1)
            assert got == {"from": 1}, got
            gathered = hvd.allgather_object(("r", me))
            assert gathered == [("r", r) for r in range(size)], gathered
        session = tf.compat.v1.Session()  # passed explicitly
        assert hvd.broadcast_object(me * 7, root_rank=0, session=session) == 0
        assert hvd.allgather_object(me, session=session) == list(range(size))
        broadcast = hvd.broadcast_object_fn(root_rank=0, session=session)
        assert broadcast([me] * (me + 1)) == [0]
        session.close()


def check_callback_broadcasts_model_without_input(hvd):
    # Horovod's Keras examples build models without an Input layer: no variables exist
    # until the first batch, so the broadcast has to wait for it.
    me = hvd.rank()
    keras.utils.set_random_seed(200 + me)
    model = keras.Sequential([keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)),
                  loss="mse")
    rng = np.random.default_rng(me)
    x, y = rng.normal(size=(12, 3)), rng.normal(size=(12, 1))
    model.fit(x, y, batch_size=4, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                         hvd.callbacks.MetricAverageCallback(device="")])
    assert int(model.optimizer.iterations) == 3
    # After the first batch's broadcast every step is identical: the replicas agree.
    weights = [w.numpy() for w in model.weights + model.optimizer.variables]
    for other in hvd.allgather_object(weights):
        for mine, theirs in zip(weights, other):
            np.testing.assert_array_equal(mine, theirs)


def check_callback_local_variables(hvd):
    me = hvd.rank()
    keras.utils.set_random_seed(300 + me)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    kernel, bias = model.layers[0].kernel, model.layers[0].bias
    bias.assign([float(me), float(me)])
    callback = hvd.callbacks.BroadcastGlobalVariablesCallback(0, device="", local_variables=[bias])
    model.fit(np.zeros((2, 2)), np.zeros((2, 2)), epochs=1, verbose=0, callbacks=[callback])
    np.testing.assert_array_equal(bias.numpy(), [me, me])  # kept local
    for other in hvd.allgather_object(kernel.numpy()):
        np.testing.assert_array_equal(other, kernel.numpy())


def check_topology(hvd):
    # tfps-run layout in this test: one host, so one "cross" group.
    assert (hvd.cross_rank(), hvd.cross_size()) == (0, 1)
    assert hvd.is_homogeneous()


def check_byteps_push_pull_scope(hvd):
    size, me = hvd.size(), hvd.rank()
    x = tf.constant([float(me + 1)] * 2)
    np.testing.assert_allclose(hvd.push_pull(x, "scope_a/"), [sum(range(1, size + 1)) / size] * 2)
    np.testing.assert_allclose(hvd.push_pull(x, scope="s/", average=False, name="n"),
                               [sum(range(1, size + 1))] * 2)
    # In a graph the key is the scope plus the tensor's name.
    graph_sum = tf.function(lambda t: hvd.push_pull(t, scope="g/", op=hvd.Sum))(x)
    np.testing.assert_allclose(graph_sum, [sum(range(1, size + 1))] * 2)


def check_keras_namespace_collectives(hvd):
    import tf_ps_ops.keras as hvd_keras

    size, me = hvd.size(), hvd.rank()
    np.testing.assert_allclose(hvd_keras.allreduce(np.float32(me), "k.avg"), (size - 1) / 2)
    np.testing.assert_allclose(hvd_keras.allreduce([me], "k.sum", op=hvd.Sum),
                               [size * (size - 1) // 2])
    np.testing.assert_array_equal(hvd_keras.allgather([me], "k.gather"), np.arange(size))
    np.testing.assert_array_equal(hvd_keras.broadcast([me, me], size - 1, "k.bcast"),
                                  [size - 1] * 2)
    everyone = hvd.global_process_set
    assert everyone.size() == size and everyone.rank() == me and everyone.included()
    np.testing.assert_allclose(hvd.allreduce(tf.ones(2), op=hvd.Sum, process_set=everyone),
                               [size] * 2)
    np.testing.assert_array_equal(hvd.allgather(tf.constant([me]), process_set=everyone),
                                  np.arange(size))


def check_broadcast_global_variables_in_v1_graph(hvd):
    size, me = hvd.size(), hvd.rank()
    with tf.Graph().as_default():
        v = tf.compat.v1.get_variable("v", initializer=np.full(3, float(me), np.float32))
        op = hvd.broadcast_global_variables(root_rank=size - 1)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(op)
            np.testing.assert_array_equal(session.run(v), np.full(3, size - 1))
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=np.full(2, float(me), np.float32))
        hook = hvd.BroadcastGlobalVariablesHook(0)
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
            np.testing.assert_array_equal(session.run(w), np.zeros(2))


def check_sync_batch_normalization(hvd):
    # Horovod's case: every worker holds one sample; the synchronised layer must match a
    # plain BatchNormalization over all workers' samples, outputs and moving statistics.
    size, me = hvd.size(), hvd.rank()
    samples = [np.stack([np.array([[r, r + 1], [r * 2, r * 2 + 1], [r * 3, r * 3 + 1],
                                   [r * 4, r * 4 + 1]], np.float32) for r in range(size)]),
               np.stack([np.array([[r + 1], [r * 2 + 1], [r * 3 + 1], [r * 4 + 1]], np.float32)
                         for r in range(size)])]
    for index, x in enumerate(samples):
        plain = keras.layers.BatchNormalization(axis=1)
        synced = hvd.SyncBatchNormalization(axis=1, name=f"sync_bn_{index}")
        expected = plain(x, training=True).numpy()
        got = synced(x[me:me + 1], training=True).numpy()
        np.testing.assert_allclose(got, expected[me:me + 1], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(synced.moving_mean, plain.moving_mean, rtol=1e-6)
        np.testing.assert_allclose(synced.moving_variance, plain.moving_variance, rtol=1e-5)
        # In a tf.function too, with gradients through the reduction.
        inputs = tf.Variable(x[me:me + 1])

        @tf.function
        def loss_and_grad():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(synced(inputs, training=True) * float(me + 1))
            return tape.gradient(loss, inputs)

        all_inputs = tf.Variable(x)
        with tf.GradientTape() as tape:
            weights = np.arange(1, size + 1, dtype=np.float32).reshape(
                (size,) + (1,) * (x.ndim - 1))
            loss = tf.reduce_sum(plain(all_inputs, training=True) * weights)
        np.testing.assert_allclose(loss_and_grad(), tape.gradient(loss, all_inputs)[me:me + 1],
                                   rtol=1e-4, atol=1e-5)


def check_reducescatter_mismatch_in_graphs(hvd):
    # Horovod raises FailedPreconditionError when the workers' shapes differ, in a
    # tf.function and in a v1 Session as eagerly (its test_horovod_reducescatter_error),
    # and the next reducescatter under the same key works.
    size, me = hvd.size(), hvd.rank()
    dims = [2 + me, 3]

    @tf.function
    def in_function():
        return hvd.reducescatter(tf.ones(dims), name="rs.mismatch.function")

    def in_session():
        with tf.Graph().as_default():
            out = hvd.reducescatter(tf.ones(dims), name="rs.mismatch.session")
            with tf.compat.v1.Session() as session:
                return session.run(out)

    for run in (in_function, in_session):
        try:
            run()
        except tf.errors.FailedPreconditionError as error:
            # The allgather of the row counts' shape check (an empty int8[1, 0, rows]).
            assert "rs.mismatch." in str(error) and f"int8[1,0,{2 + me}]" in str(error), error
        else:
            raise AssertionError(f"rank {me}: {run.__name__} raised no FailedPreconditionError")
    out = tf.function(lambda: hvd.reducescatter(tf.ones([size, 3]) * (me + 1), op=hvd.Sum,
                                                name="rs.mismatch.function"))()
    np.testing.assert_array_equal(out, np.full([1, 3], size * (size + 1) / 2, np.float32))


CHECKS = [check_broadcast_grad_is_averaged, check_allgather_grad,
          check_allgather_grad_in_v1_graph, check_broadcast_inplace_in_v1_graph,
          check_indexed_slices_gathered, check_fp16_scaling_in_fp32,
          check_objects_in_v1_graph, check_callback_broadcasts_model_without_input,
          check_callback_local_variables, check_topology, check_byteps_push_pull_scope,
          check_keras_namespace_collectives, check_broadcast_global_variables_in_v1_graph,
          check_sync_batch_normalization, check_reducescatter_mismatch_in_graphs]

if __name__ == "__main__":
    run_checks(CHECKS)

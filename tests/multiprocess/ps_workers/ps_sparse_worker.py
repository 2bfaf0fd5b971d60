"""Sparse PS updates (PsSparseApply) on an embedding table, checked against stock TF.

Every worker touches a few rows per step (some shared with other workers, some repeated
within its own batch). Oracle, inside every worker: TF's own ResourceSparseApplyXXX on
the mean gradient (the union of touched rows, duplicates summed, divided by the number of
workers), from rank 0's start. Bytes: the engine's payload counter per step, for two table
sizes, printed as `BYTES rows=<table rows> per_step=<bytes>` for the test to read.
"""

import ctypes
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workers"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import numpy as np  # noqa: E402

from ps_worker import assert_close, assert_replicas_identical  # noqa: E402

STEPS = 8
ROWS, DIM, TOUCHED = 1000, 16, 10


def batches(size, table_rows, step):
    """Each rank's row ids and gradient rows of one step: ~TOUCHED ids, with repeats."""
    out = []
    for rank in range(size):
        rng = np.random.default_rng(1000 * step + rank)
        ids = np.concatenate([rng.integers(0, 20, 3), rng.integers(0, table_rows, TOUCHED - 3)])
        out.append((ids.astype(np.int64), rng.standard_normal((TOUCHED, DIM)).astype(np.float32)))
    return out


def mean_rows(all_batches, size, rows):
    """The mean gradient over workers as (unique ids, rows): what the servers apply."""
    dense = np.zeros((rows, DIM), np.float32)
    for ids, values in all_batches:
        np.add.at(dense, ids, values)
    touched = np.unique(np.concatenate([ids for ids, _ in all_batches]))
    return touched, dense[touched] / np.float32(size)


def table(rank, rows=ROWS):
    return np.random.default_rng(50 + rank).standard_normal((rows, DIM)).astype(np.float32)


# (name, PS op, stock raw op, slot initial values, scalar inputs, attrs)
CASES = [
    ("adagrad", "ps_sparse_apply_adagrad", "ResourceSparseApplyAdagrad", [0.1],
     dict(lr=0.1), {}),
    ("adagrad_v2", "ps_sparse_apply_adagrad_v2", "ResourceSparseApplyAdagradV2", [0.1],
     dict(lr=0.1, epsilon=1e-7), {}),
    ("momentum", "ps_sparse_apply_momentum", "ResourceSparseApplyMomentum", [0.0],
     dict(lr=0.05, momentum=0.9), dict(use_nesterov=True)),
    ("keras_momentum", "ps_sparse_apply_keras_momentum", "ResourceSparseApplyKerasMomentum",
     [0.0], dict(lr=0.05, momentum=0.9), {}),
    ("rmsprop", "ps_sparse_apply_rms_prop", "ResourceSparseApplyRMSProp", [1.0, 0.0],
     dict(lr=0.01, rho=0.9, momentum=0.3, epsilon=1e-7), {}),
    ("centered_rmsprop", "ps_sparse_apply_centered_rms_prop",
     "ResourceSparseApplyCenteredRMSProp", [0.0, 1.0, 0.0],
     dict(lr=0.01, rho=0.9, momentum=0.3, epsilon=1e-7), {}),
]
SLOT_NAMES = {1: ["accum"], 2: ["ms", "mom"], 3: ["mg", "ms", "mom"]}


def _train(hvd, case, ps):
    import tensorflow as tf
    from tf_ps_ops.common.library import ops
    name, ps_op, tf_op, slots, scalars, attrs = case
    var = tf.Variable(table(hvd.rank() if ps else 0))
    slot_vars = [tf.Variable(np.full((ROWS, DIM), s, np.float32)) for s in slots]
    args = {k: tf.constant(v, tf.float32) for k, v in scalars.items()}
    args.update(attrs)
    args.update({n: v.handle for n, v in zip(SLOT_NAMES[len(slots)], slot_vars)})
    for step in range(STEPS):
        every = batches(hvd.size(), ROWS, step)
        if ps:
            ids, values = every[hvd.rank()]
            getattr(ops(), ps_op)(var=var.handle, grad=values, indices=ids,
                                  tensor_name="sparse:" + name, **args)
        else:
            ids, values = mean_rows(every, hvd.size(), ROWS)
            getattr(tf.raw_ops, tf_op)(var=var.handle, grad=values, indices=ids, **args)
    return var.numpy()


def check_sparse_ops_match_stock_sparse_ops(hvd):
    for case in CASES:
        got = _train(hvd, case, ps=True)
        want = _train(hvd, case, ps=False)
        assert_close(got, want, hvd, "sparse " + case[0])
        assert_replicas_identical(hvd, [got], "sparse_" + case[0])


def check_sparse_adagrad_matches_dense_ps_adagrad(hvd):
    """Adagrad leaves a row with a zero gradient unchanged, so the dense update of the
    densified gradient is the same math: the two PS paths must agree."""
    import tensorflow as tf
    from tf_ps_ops.common.library import ops
    results = []
    for sparse in (True, False):
        var = tf.Variable(table(hvd.rank()))
        accum = tf.Variable(np.full((ROWS, DIM), 0.1, np.float32))
        for step in range(STEPS):
            ids, values = batches(hvd.size(), ROWS, step)[hvd.rank()]
            key = "adagrad_path:" + ("sparse" if sparse else "dense")
            if sparse:
                ops().ps_sparse_apply_adagrad(var=var.handle, accum=accum.handle, lr=0.1,
                                              grad=values, indices=ids, tensor_name=key)
            else:
                dense = np.zeros((ROWS, DIM), np.float32)
                np.add.at(dense, ids, values)
                ops().ps_apply_adagrad(var=var.handle, accum=accum.handle, lr=0.1, grad=dense,
                                       tensor_name=key)
        results.append(var.numpy())
    if hvd.size() == 1:
        assert np.array_equal(results[0], results[1]), "sparse and dense Adagrad differ"
    assert_close(results[0], results[1], hvd, "sparse vs dense adagrad")


def check_v1_adagrad_rewrite_uses_the_sparse_op(hvd):
    import tensorflow as tf
    import tf_ps_ops.ps_mode as ps_mode
    results = []
    for rewrite in (True, False):
        emb = tf.Variable(table(hvd.rank() if rewrite else 0), name=f"emb_v1_{rewrite}")
        opt = tf.compat.v1.train.AdagradOptimizer(0.1)
        if rewrite:
            ps_mode.initialize_variables([emb])
        (ps_mode.enable_graph_rewrite if rewrite else ps_mode.disable_graph_rewrite)()
        try:
            @tf.function
            def step(ids, upstream):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(tf.gather(emb, ids) * upstream)
                opt.apply_gradients([(tape.gradient(loss, emb), emb)])

            for s in range(STEPS):
                every = batches(hvd.size(), ROWS, s)
                if rewrite:
                    ids, values = every[hvd.rank()]
                else:  # the mean gradient: rows of every rank, scaled by 1/size
                    ids = np.concatenate([i for i, _ in every])
                    values = np.concatenate([v for _, v in every]) / np.float32(hvd.size())
                step(tf.constant(ids), tf.constant(values))
            types = {op.type for op in step.get_concrete_function(
                tf.constant(ids), tf.constant(values)).graph.get_operations()}
            assert ("PsSparseApplyAdagrad" in types) == rewrite, sorted(types)
        finally:
            ps_mode.disable_graph_rewrite()
        results.append(emb.numpy())
    assert_close(results[0], results[1], hvd, "v1 adagrad sparse rewrite")
    assert_replicas_identical(hvd, [results[0]], "v1_sparse_adagrad")


def check_keras_sgd_and_adagrad_send_rows(hvd):
    import keras
    import tensorflow as tf
    from tf_ps_ops import optimizers as ps_optimizers
    for name in ("SGD", "Adagrad"):
        emb = keras.layers.Embedding(ROWS, DIM)
        emb.build((None,))
        emb.embeddings.assign(table(hvd.rank()))
        oracle = keras.layers.Embedding(ROWS, DIM)
        oracle.build((None,))
        oracle.embeddings.assign(table(0))
        ps_opt = getattr(ps_optimizers, name)(learning_rate=0.1)
        ps_opt.build(emb.trainable_variables)
        stock = getattr(keras.optimizers, name)(learning_rate=0.1)
        before = _bytes_sent()
        for step in range(STEPS):
            every = batches(hvd.size(), ROWS, step)
            ids, up = every[hvd.rank()]
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(emb(ids) * up)
            grads = tape.gradient(loss, emb.trainable_variables)
            assert isinstance(grads[0], tf.IndexedSlices), type(grads[0])
            ps_opt.apply(grads, emb.trainable_variables)
            ids = np.concatenate([i for i, _ in every])
            up = np.concatenate([v for _, v in every]) / np.float32(hvd.size())
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(oracle(ids) * up)
            # Densified: Keras's own Adagrad squares each duplicate row of IndexedSlices
            # separately (sum of squares); the dense math (square of the sum) is ours.
            stock.apply([tf.convert_to_tensor(g) for g in
                         tape.gradient(loss, oracle.trainable_variables)],
                        oracle.trainable_variables)
        assert (_bytes_sent() - before) / STEPS <= TOUCHED * (8 + DIM * 4)
        assert_close(emb.embeddings.numpy(), oracle.embeddings.numpy(), hvd, "keras " + name,
                     keras3=True)
        assert_replicas_identical(hvd, [emb.embeddings.numpy()], "keras_sparse_" + name)


def check_row_lookups_and_readers_around_in_place_rows(hvd):
    """tf_ps_ops.keras.Embedding reads rows (ResourceGather: the table goes into
    copy-on-read mode) and PS mode writes the answered rows in place. Against Keras's own
    layer and SGD on the mean gradient; a dense read taken before a step, with the table in
    either mode (shared buffer; copy), keeps its values after the step."""
    import keras
    import tensorflow as tf
    from tf_ps_ops import optimizers as ps_optimizers
    from tf_ps_ops.keras import Embedding
    emb, oracle = Embedding(ROWS, DIM), keras.layers.Embedding(ROWS, DIM)
    for layer, start in ((emb, table(hvd.rank())), (oracle, table(0))):
        layer.build((None,))
        layer.embeddings.assign(start)
    ps_opt = ps_optimizers.SGD(learning_rate=0.1)
    ps_opt.build(emb.trainable_variables)
    stock = keras.optimizers.SGD(learning_rate=0.1)

    @tf.function
    def step(ids, up):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(emb(ids) * up)
        ps_opt.apply(tape.gradient(loss, emb.trainable_variables), emb.trainable_variables)

    for s in range(STEPS):
        every = batches(hvd.size(), ROWS, s)
        held = emb.embeddings.value.read_value()
        snapshot = held.numpy().copy()
        step(tf.constant(every[hvd.rank()][0]), tf.constant(every[hvd.rank()][1]))
        assert np.array_equal(held.numpy(), snapshot), f"step {s}: a held read changed"
        ids = np.concatenate([i for i, _ in every])
        up = np.concatenate([v for _, v in every]) / np.float32(hvd.size())
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(oracle(ids) * up)
        stock.apply(tape.gradient(loss, oracle.trainable_variables), oracle.trainable_variables)
        assert not np.array_equal(emb.embeddings.numpy(), snapshot), f"step {s}: no update"
    assert_close(emb.embeddings.numpy(), oracle.embeddings.numpy(), hvd, "row lookups",
                 keras3=True)
    assert_replicas_identical(hvd, [emb.embeddings.numpy()], "row_lookups")


def _bytes_sent():
    from tf_ps_ops.common import library as _library
    function = _library.c_api().tfps_bytes_sent
    function.restype = ctypes.c_ulonglong
    return function()


def check_bytes_scale_with_touched_rows(hvd):
    import tensorflow as tf
    from tf_ps_ops.common.library import ops
    for rows in (ROWS, 100 * ROWS):
        var = tf.Variable(table(hvd.rank(), rows))
        accum = tf.Variable(np.full((rows, DIM), 0.1, np.float32))
        key = f"bytes:{rows}"
        ops().ps_init_variable(var.handle, tensor_name=key)
        before = _bytes_sent()
        for step in range(STEPS):
            ids, values = batches(hvd.size(), rows, step)[hvd.rank()]
            ops().ps_sparse_apply_adagrad(var=var.handle, accum=accum.handle, lr=0.1,
                                          grad=values, indices=ids, tensor_name=key)
        per_step = (_bytes_sent() - before) / STEPS
        print(f"BYTES rows={rows} per_step={per_step:.0f} dense={rows * DIM * 4}", flush=True)
        # Unique ids (<= TOUCHED) with an int64 id each: never more than this.
        assert per_step <= TOUCHED * (8 + DIM * 4), per_step


CHECKS = [check_sparse_ops_match_stock_sparse_ops, check_sparse_adagrad_matches_dense_ps_adagrad,
          check_v1_adagrad_rewrite_uses_the_sparse_op, check_keras_sgd_and_adagrad_send_rows,
          check_row_lookups_and_readers_around_in_place_rows,
          check_bytes_scale_with_touched_rows]

if __name__ == "__main__":
    harness.run_checks(CHECKS)

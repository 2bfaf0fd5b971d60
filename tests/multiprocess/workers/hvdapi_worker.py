"""Worker for test_hvdapi.py (issue 12): the rank-local error checks of
local_error_worker.py, then the rest of Horovod's TensorFlow API, each
against a single-process TensorFlow/NumPy oracle on the same data (every worker can
compute every other worker's input, a function of the rank):
  - backward_passes_per_step > 1 (local gradient aggregation) in DistributedOptimizer
    (custom loop, eagerly, and under fit) and DistributedGradientTape (tf.function);
  - PartialDistributedOptimizer / PartialDistributedGradientTape, register_local_var,
    broadcast_variables skipping local variables;
  - start_timeline / stop_timeline at run time;
  - Horovod's Compression.fp16 (a real float16 cast) next to the core codec.
"""

import json
import os

import keras
import numpy as np
import tensorflow as tf

from harness import run_checks
from local_error_worker import (check_allgather, check_allreduce_eager,
                                check_allreduce_tf_function, check_alltoall_and_reducescatter,
                                check_broadcast, check_tape, check_v1_session)

FEATURES, UNITS = 3, 2


def batch(rank, index):
    rng = np.random.default_rng(100 * index + rank)
    return (rng.normal(size=(4, FEATURES)).astype(np.float32),
            rng.normal(size=(4, UNITS)).astype(np.float32))


def initial_kernel():
    return np.arange(FEATURES * UNITS, dtype=np.float32).reshape(FEATURES, UNITS) / 10


def make_model(name):
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(
        UNITS, kernel_initializer=keras.initializers.Constant(initial_kernel()),
        bias_initializer="zeros", name=name)])
    return model


def oracle_grads(kernel, bias, rank, index):
    x, y = batch(rank, index)
    k, b = tf.Variable(kernel), tf.Variable(bias)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.matmul(x, k) + b - y))
    gk, gb = tape.gradient(loss, [k, b])
    return gk.numpy(), gb.numpy()


def oracle_sgd(passes, updates, lr, average, size, local=()):
    """Single process: `updates` updates of plain SGD, each from `passes` passes' gradients
    summed (divided by `passes` when `average`) and averaged over the workers. Names in
    `local` ("kernel", "bias") stay this worker's own, not averaged (rank 0's here)."""
    kernel, bias = initial_kernel(), np.zeros(UNITS, np.float32)
    index = 0
    for _ in range(updates):
        per_rank = []
        for r in range(size):
            gk, gb = np.zeros_like(kernel), np.zeros_like(bias)
            for p in range(passes):
                k_, b_ = oracle_grads(kernel, bias, r, index + p)
                gk, gb = gk + k_, gb + b_
            per_rank.append((gk, gb))
        index += passes
        gk = np.mean([g[0] for g in per_rank], axis=0)
        gb = np.mean([g[1] for g in per_rank], axis=0)
        if average:
            gk, gb = gk / passes, gb / passes
        kernel, bias = kernel - lr * gk, bias - lr * gb
    return kernel, bias


def check_optimizer_aggregation_eager(hvd):
    passes, lr = 3, 0.1
    model = make_model("agg_eager")
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(lr), backward_passes_per_step=passes,
                                   average_aggregated_gradients=True)
    start = [w.numpy() for w in model.trainable_variables]
    for index in range(2 * passes):
        x, y = batch(hvd.rank(), index)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        if index == passes - 2:  # before the N-th pass nothing changed
            for w, w0 in zip(model.trainable_variables, start):
                np.testing.assert_array_equal(w.numpy(), w0)
        if index == passes - 1:
            kernel, bias = oracle_sgd(passes, 1, lr, True, hvd.size())
            np.testing.assert_allclose(model.trainable_variables[0].numpy(), kernel, rtol=1e-5)
            np.testing.assert_allclose(model.trainable_variables[1].numpy(), bias, atol=1e-6)
    assert int(opt.iterations.numpy()) == 2 * passes, opt.iterations.numpy()
    kernel, bias = oracle_sgd(passes, 2, lr, True, hvd.size())
    np.testing.assert_allclose(model.trainable_variables[0].numpy(), kernel, rtol=1e-5)
    np.testing.assert_allclose(model.trainable_variables[1].numpy(), bias, atol=1e-6)


def check_optimizer_aggregation_fit(hvd):
    passes, lr, updates = 2, 0.05, 2
    model = make_model("agg_fit")
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(lr), backward_passes_per_step=passes)
    model.compile(optimizer=opt, loss="mse", jit_compile=False)
    xs, ys = zip(*(batch(hvd.rank(), i) for i in range(passes * updates)))
    model.fit(np.concatenate(xs), np.concatenate(ys), batch_size=4, epochs=1, shuffle=False,
              verbose=0)
    kernel, bias = oracle_sgd(passes, updates, lr, False, hvd.size())
    np.testing.assert_allclose(model.trainable_variables[0].numpy(), kernel, rtol=1e-5)
    np.testing.assert_allclose(model.trainable_variables[1].numpy(), bias, atol=1e-6)


def check_tape_aggregation_tf_function(hvd):
    passes = 2
    kernel = tf.Variable(initial_kernel(), name="tape_agg_kernel")
    bias = tf.Variable(np.zeros(UNITS, np.float32), name="tape_agg_bias")

    @tf.function
    def grads_of(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, kernel) + bias - y))
        tape = hvd.DistributedGradientTape(tape, backward_passes_per_step=passes)
        return tape.gradient(loss, [kernel, bias])

    local = [np.zeros_like(initial_kernel()), np.zeros(UNITS, np.float32)]
    for index in range(2 * passes):
        got = grads_of(*batch(hvd.rank(), index))
        mine = oracle_grads(kernel.numpy(), bias.numpy(), hvd.rank(), index)
        local = [a + b for a, b in zip(local, mine)]
        if index % passes != passes - 1:  # the local sums so far, not reduced
            for g, want in zip(got, local):
                np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-6)
            continue
        start = index - passes + 1
        want = [np.mean([sum(oracle_grads(kernel.numpy(), bias.numpy(), r, start + p)[i]
                             for p in range(passes)) for r in range(hvd.size())], axis=0)
                for i in range(2)]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6)
        local = [np.zeros_like(a) for a in local]


def two_layer_model(prefix):
    return keras.Sequential([
        keras.Input((FEATURES,)),
        keras.layers.Dense(UNITS, kernel_initializer=keras.initializers.Constant(
            initial_kernel()), name=prefix + "_shared"),
        keras.layers.Dense(UNITS, kernel_initializer="identity", bias_initializer="ones",
                           name=prefix + "_local")])


def per_rank_grads(size):
    """Oracle: each rank's gradients of the two-layer model at its initial weights."""
    model = two_layer_model("oracle")
    out = []
    for r in range(size):
        x, y = batch(r, 0)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        out.append([g.numpy() for g in tape.gradient(loss, model.trainable_variables)])
    return out


def expected_partial(hvd, local_indices, scale):
    grads = per_rank_grads(hvd.size())
    want = []
    for i in range(len(grads[0])):
        if i in local_indices:
            own = grads[hvd.rank()][i]
            want.append(own / hvd.size() if scale else own)
        else:
            want.append(np.mean([g[i] for g in grads], axis=0))
    return want


def check_partial_optimizer(hvd):
    lr = 0.5
    for scale in (True, False):
        model = two_layer_model(f"partial{int(scale)}")
        start = [w.numpy() for w in model.trainable_variables]
        opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(lr),
                                              local_layers=[model.layers[1]],
                                              scale_local_gradients=scale)
        x, y = batch(hvd.rank(), 0)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))
        want = expected_partial(hvd, {2, 3}, scale)
        for w, w0, g in zip(model.trainable_variables, start, want):
            np.testing.assert_allclose(w.numpy(), w0 - lr * g, rtol=1e-5, atol=1e-6)
    # register_local_var on a plain DistributedOptimizer: the same, for one variable.
    model = two_layer_model("registered")
    start = [w.numpy() for w in model.trainable_variables]
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(lr))
    opt.register_local_var(model.trainable_variables[3])
    x, y = batch(hvd.rank(), 0)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                            model.trainable_variables))
    want = expected_partial(hvd, {3}, True)
    for w, w0, g in zip(model.trainable_variables, start, want):
        np.testing.assert_allclose(w.numpy(), w0 - lr * g, rtol=1e-5, atol=1e-6)


def check_partial_tape(hvd):
    model = two_layer_model("partial_tape")
    model(np.zeros((1, FEATURES), np.float32))

    @tf.function
    def grads_of(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        tape = hvd.PartialDistributedGradientTape(tape, local_layers=model.layers[1])
        return tape.gradient(loss, model.trainable_variables)

    got = grads_of(*batch(hvd.rank(), 0))
    for g, w in zip(got, expected_partial(hvd, {2, 3}, True)):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6)
    x, y = batch(hvd.rank(), 0)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    tape = hvd.DistributedGradientTape(tape)
    tape.register_local_source(model.trainable_variables[0])
    got = tape.gradient(loss, model.trainable_variables)
    for g, w in zip(got, expected_partial(hvd, {0}, True)):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6)
    # Horovod's get_local_and_global_gradients: the same gradients as (source, grad)
    # pairs, split into the local layer's and the others', each in the sources' order.
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=model.layers[1])
    variables = model.trainable_variables
    local, shared = tape.get_local_and_global_gradients(loss, variables)
    assert [id(v) for v, _ in local] == [id(v) for v in variables[2:]], local
    assert [id(v) for v, _ in shared] == [id(v) for v in variables[:2]], shared
    for (_, g), w in zip(shared + local, expected_partial(hvd, {2, 3}, True)):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6)


def check_v1_optimizer_aggregation(hvd):
    # horovod.tensorflow's DistributedOptimizer on a tf.compat.v1 optimizer in a Session:
    # rank r's gradient is always r; a variable adds up what it is applied.
    passes, steps = 3, 7
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        class Adding(tf.compat.v1.train.Optimizer):
            def __init__(self):
                super().__init__(use_locking=False, name="adding")
                self.variable = tf.Variable([0.0], name="v1_agg")

            def compute_gradients(self, *args, **kwargs):
                return [(tf.constant([float(hvd.rank() + 1)]), self.variable)]

            def _resource_apply_dense(self, grad, var):
                return var.assign_add(grad).op

        step = tf.compat.v1.train.get_or_create_global_step()
        opt = hvd.DistributedOptimizer(Adding(), backward_passes_per_step=passes,
                                       average_aggregated_gradients=True)
        update = opt.apply_gradients(opt.compute_gradients(), global_step=step)
        sess.run(tf.compat.v1.global_variables_initializer())
        mean = np.mean([r + 1.0 for r in range(hvd.size())])
        for index in range(steps):
            sess.run(update)
            applied = (index + 1) // passes
            # Each application: the mean over workers of N passes' sum, divided by N.
            value = sess.run(opt._optimizer.variable)[0]
            np.testing.assert_allclose(value, applied * mean, rtol=1e-6, err_msg=str(index))
        assert sess.run(step) == steps  # the skipped passes still count


def check_timeline(hvd):
    tmp = os.environ["HVDAPI_TMP"]
    path = os.path.join(tmp, "timeline.%r.json")
    mine = os.path.join(tmp, f"timeline.{hvd.rank()}.json")
    hvd.start_timeline(path, mark_cycles=True)
    out = hvd.allreduce(tf.fill([1000], float(hvd.rank())), op=hvd.Sum, name="timeline.sum")
    np.testing.assert_array_equal(out, np.full(1000, sum(range(hvd.size())), np.float32))
    # A peer collective (allgather, SFB's factors) shows its exchange and completion too.
    gathered = hvd.allgather(tf.fill([2, 3], float(hvd.rank())), name="timeline.gather")
    np.testing.assert_array_equal(
        gathered, np.repeat(np.arange(hvd.size(), dtype=np.float32), 2)[:, None] * np.ones(3))
    assert not os.path.exists(mine), "written before stop_timeline()"
    hvd.stop_timeline()
    with open(mine) as f:
        trace = json.load(f)  # valid JSON, Chrome's trace format
    events = trace["traceEvents"]
    stages = {e["name"] for e in events
              if e.get("ph") == "X" and e["args"]["tensor"] == "timeline.sum"}
    assert {"queued", "written"} <= stages, stages
    assert {"push", "server", "pull"} <= stages or "push_pull" in stages, stages
    gather = [e for e in events
              if e.get("ph") == "X" and e["args"]["tensor"] == "timeline.gather"]
    assert {e["name"] for e in gather} == {"allgather", "written"}, gather
    assert all(e["args"]["bytes"] == 2 * 3 * 4 for e in gather), gather
    for e in events:
        if e.get("ph") == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0 and e["pid"] == hvd.rank(), e
    assert any(e["name"] == "CYCLE_START" and e["ph"] == "i" for e in events)
    assert any(e["name"] == "thread_name" and e["args"]["name"] == "timeline.sum"
               for e in events)
    # Stopped: later collectives are not recorded, stopping again does nothing.
    hvd.allreduce(tf.ones([3]), name="timeline.after")
    hvd.stop_timeline()
    with open(mine) as f:
        assert "timeline.after" not in f.read()
    # Without cycle marks there are none.
    hvd.start_timeline(mine + ".2")
    hvd.allreduce(tf.ones([3]), name="timeline.second")
    hvd.stop_timeline()
    with open(mine + ".2") as f:
        events = json.load(f)["traceEvents"]
    assert not any(e["name"] == "CYCLE_START" for e in events)
    assert any(e.get("args", {}).get("tensor") == "timeline.second" for e in events)
    for bad in ("", None):
        try:
            hvd.start_timeline(bad)
        except ValueError:
            continue
        raise AssertionError(f"start_timeline({bad!r}) was accepted")


def check_fp16_compression(hvd):
    fp16 = hvd.Compression.fp16
    # Horovod's interface, called directly: a real float16 cast and back.
    for dtype in (tf.float16, tf.float32, tf.float64):
        tensor = tf.constant([1.5, -2.25, 1e-3], dtype)
        sent, ctx = fp16.compress(tensor)
        assert sent.dtype == tf.float16, sent.dtype
        back = fp16.decompress(sent, ctx)
        assert back.dtype == dtype, back.dtype
        np.testing.assert_allclose(back.numpy(), tensor.numpy().astype(np.float16), rtol=1e-3)
    for dtype in (tf.int32, tf.int64, tf.uint8):
        sent, ctx = fp16.compress(tf.constant([1, 2], dtype))
        assert sent.dtype == dtype and fp16.decompress(sent, ctx).dtype == dtype
    # In allreduce the core codec still runs inside the op (its byte counter grows): each
    # worker's values round to fp16, the servers sum in float32 and round the sum once.
    from tf_ps_ops.common import library as _library
    raw_before = _library.c_api().tfps_codec_raw_bytes()
    values = np.linspace(-1000.3, 1000.7, 64).astype(np.float32) * (hvd.rank() + 1)
    out = hvd.allreduce(tf.constant(values), op=hvd.Sum, compression=fp16, name="fp16.sum")
    assert out.dtype == tf.float32
    assert _library.c_api().tfps_codec_raw_bytes() - raw_before >= values.nbytes
    rounded = [(np.linspace(-1000.3, 1000.7, 64).astype(np.float32) * (r + 1)).astype(
        np.float16).astype(np.float32) for r in range(hvd.size())]
    want = np.sum(rounded, axis=0).astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-3, atol=1e-3)


# One cluster for both files (every TF start costs seconds): the rank-local error checks
# first, then this file's.
CHECKS = [check_allreduce_eager, check_allreduce_tf_function, check_broadcast,
          check_allgather, check_alltoall_and_reducescatter, check_tape, check_v1_session,
          check_optimizer_aggregation_eager, check_optimizer_aggregation_fit,
          check_tape_aggregation_tf_function, check_v1_optimizer_aggregation,
          check_partial_optimizer, check_partial_tape,
          check_timeline, check_fp16_compression]

if __name__ == "__main__":
    run_checks(CHECKS)

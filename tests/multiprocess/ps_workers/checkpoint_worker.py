"""PS-mode checkpoints seen from a worker (tests/multiprocess/test_ps_checkpoint.py).

    checkpoint_worker.py train OUT GO   steps 1-5, values after steps 3 and 5 to OUT; prints
                                        "trained", waits for the file GO, then expects the
                                        next step to fail (the test has killed a server)
    checkpoint_worker.py resume OUT     adopts the (restored) servers' values, saves them,
                                        runs steps 4-5 and saves the result
    checkpoint_worker.py restore OUT    steps 1-3, save_weights, steps 4-5, load_weights +
                                        push_variables, step 6: from the restored values

Every rank starts from its own random weights (rank 0's reach the servers first, or the
servers' restored ones win); the batch of (rank, step) is fixed, so a run resumed at step 4
repeats the uninterrupted run bit for bit (two workers: a sum of two does not depend on
arrival order). Values go to OUT/<what>-rank<r>.npz, keyed by variable path.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workers"))
import harness  # noqa: E402

import numpy as np  # noqa: E402

LR, MOMENTUM = 0.05, 0.9
DIM_IN, DIM_OUT, ROWS = 6, 3, 8


def batch(rank, step):
    rng = np.random.default_rng(1000 * rank + step)
    return (rng.standard_normal((ROWS, DIM_IN)).astype(np.float32),
            rng.standard_normal((ROWS, DIM_OUT)).astype(np.float32))


def make_model(seed):
    import keras
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((DIM_IN,)), keras.layers.Dense(5, activation="tanh"),
                             keras.layers.Dense(DIM_OUT)])


def gradients(model, rank, step):
    import tensorflow as tf
    x, y = batch(rank, step)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
    return tape.gradient(loss, model.trainable_variables)


def train(hvd, model, optimizer, steps):
    for step in steps:
        optimizer.apply(gradients(model, hvd.rank(), step), model.trainable_variables)


def values(model):
    return {v.path: v.numpy() for v in model.trainable_variables}


def save(out, what, hvd, named):
    np.savez(os.path.join(out, f"{what}-rank{hvd.rank()}.npz"),
             **{path.replace("/", "|"): value for path, value in named.items()})


def server_values(model):
    """What the servers hold: a PsInitVariable of a scratch variable under each key adopts
    the servers' value (they hold the parameter, so rank 0's scratch value is ignored)."""
    import tensorflow as tf
    from tf_ps_ops import ps_mode
    out = {}
    for v in model.trainable_variables:
        scratch = tf.Variable(np.full(v.shape, np.nan, np.float32))
        ps_mode.initialize_variables([scratch], names=[ps_mode.ps_key(v.path)])
        out[v.path] = scratch.numpy()
    return out


def assert_identical(got, want, what):
    for path in want:
        if got[path].tobytes() != want[path].tobytes():
            raise AssertionError(f"{what}: {path} differs:\n{got[path]}\nvs\n{want[path]}")


def optimizer():
    from tf_ps_ops import optimizers
    return optimizers.SGD(learning_rate=LR, momentum=MOMENTUM)


def run_train(hvd, out, go):
    import tensorflow as tf
    model, opt = make_model(100 + hvd.rank()), optimizer()
    opt.build(model.trainable_variables)
    train(hvd, model, opt, range(1, 4))
    save(out, "step3", hvd, values(model))
    train(hvd, model, opt, range(4, 6))
    save(out, "step5", hvd, values(model))
    # After every step the variables hold what the servers answered: a Keras save in PS
    # mode saves the servers' values.
    assert_identical(values(model), server_values(model), "variables vs servers after step 5")
    print("trained", flush=True)
    deadline = time.monotonic() + 90
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{go} never appeared")
        time.sleep(0.05)
    try:
        train(hvd, model, opt, [6])
    except tf.errors.UnavailableError as e:
        print("server loss seen:", str(e).splitlines()[0], flush=True)
        return
    raise AssertionError("step 6 succeeded although a server was killed")


def run_resume(hvd, out):
    model, opt = make_model(900 + hvd.rank()), optimizer()  # not the first run's start
    opt.build(model.trainable_variables)  # the servers hold restored values: adopt them
    save(out, "restored", hvd, values(model))
    train(hvd, model, opt, range(4, 6))
    save(out, "step5", hvd, values(model))


def run_restore(hvd, out):
    import tensorflow as tf
    from tf_ps_ops import ps_mode
    model, opt = make_model(100 + hvd.rank()), optimizer()
    opt.build(model.trainable_variables)
    train(hvd, model, opt, range(1, 4))
    saved = values(model)
    assert_identical(saved, server_values(model), "variables vs servers after step 3")
    path = os.path.join(out, "model.weights.h5")
    if hvd.rank() == 0:
        model.save_weights(path)
    hvd.allgather(tf.constant([hvd.rank()]), name="saved")  # the file exists from here on
    train(hvd, model, opt, range(4, 6))  # the servers move on (values and momentum)
    model.load_weights(path)
    assert_identical(values(model), saved, "load_weights")
    ps_mode.push_variables(model.trainable_variables)
    assert_identical(server_values(model), saved, "servers after push_variables")
    train(hvd, model, opt, [6])
    after = values(model)
    # The oracle: one Keras momentum step from the restored values with fresh (zero)
    # velocity, on the mean of both ranks' gradients.
    oracle = make_model(0)
    oracle.set_weights([saved[v.path] for v in model.trainable_variables])
    mean = [sum(g) / hvd.size() for g in zip(*(gradients(oracle, r, 6) for r in range(hvd.size())))]
    for v, g in zip(model.trainable_variables, mean):
        np.testing.assert_allclose(after[v.path], saved[v.path] - LR * g.numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=v.path)
    flat = np.concatenate([after[v.path].ravel() for v in model.trainable_variables])
    everyone = hvd.allgather(tf.constant(flat[None, :]), name="replicas").numpy()
    assert all(np.array_equal(row, everyone[0]) for row in everyone), "replicas differ"
    save(out, "step6", hvd, after)


def main():
    harness.pin_threads()
    import tf_ps_ops as hvd
    mode, out = sys.argv[1], sys.argv[2]
    hvd.init()
    if mode == "train":
        run_train(hvd, out, sys.argv[3])
    elif mode == "resume":
        run_resume(hvd, out)
    elif mode == "restore":
        run_restore(hvd, out)
    else:
        raise SystemExit(f"unknown mode {mode}")
    hvd.shutdown()
    print("done", flush=True)


if __name__ == "__main__":
    main()

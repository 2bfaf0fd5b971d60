"""Worker for test_algorithm_checkpoint.py (2 workers): algorithm state survives a
tf.train.Checkpoint round trip. LowPrecisionDecentralized's public copies and step
counter, saved after 2 steps and restored into a fresh algorithm before it is built, make
the third step equal the uninterrupted one; QAdam's m, v and step counter come back
through tf.train.Checkpoint(optimizer=DistributedOptimizer(...)) alone."""

import os
import shutil
import sys
import tempfile

import keras
import numpy as np
import tensorflow as tf

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(_HERE, "..", ".."), os.path.join(_HERE, "..", "workers")]
from harness import run_checks  # noqa: E402

LR = 0.1


def _step(hvd, algorithm, w, r):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(tf.convert_to_tensor(w) - float(r + 1)))
    grads = hvd.DistributedGradientTape(tape, algorithm=algorithm).gradient(loss, [w])
    keras.optimizers.SGD(LR).apply(grads, [w])


def check_low_precision_state_round_trip(hvd):
    from tf_ps_ops.algorithms import LowPrecisionDecentralized

    r = hvd.rank()
    start = np.random.default_rng(10 + r).normal(size=(4, 300)).astype(np.float32)
    directory = tempfile.mkdtemp(prefix="tfps_algorithm_ckpt.")
    try:
        algorithm = LowPrecisionDecentralized()
        w = tf.Variable(start, name="w")
        for _ in range(2):
            _step(hvd, algorithm, w, r)
        path = tf.train.Checkpoint(w=w, algorithm=algorithm.checkpoint_state).save(
            os.path.join(directory, "ckpt"))
        assert int(algorithm.step_count.numpy()) == 2
        assert np.abs(algorithm.own_copies[0].numpy()).max() > 0  # there is state to lose

        restored = LowPrecisionDecentralized()
        w2 = tf.Variable(tf.zeros_like(start), name="w")
        status = tf.train.Checkpoint(w=w2, algorithm=restored.checkpoint_state).restore(path)
        restored.ensure_built([w2], algorithm._keys)  # deferred restoration fills it here
        status.assert_existing_objects_matched()
        assert int(restored.step_count.numpy()) == 2
        for mine, theirs in ((algorithm.own_copies, restored.own_copies),
                             (algorithm.peer_copies, restored.peer_copies)):
            np.testing.assert_array_equal(mine[0].numpy(), theirs[0].numpy())
        np.testing.assert_array_equal(w.numpy(), w2.numpy())
        # Step 3 from the restored state equals step 3 of the uninterrupted run.
        _step(hvd, algorithm, w, r)
        _step(hvd, restored, w2, r)
        np.testing.assert_array_equal(w.numpy(), w2.numpy())
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def check_qadam_state_round_trip_through_the_optimizer(hvd):
    from tf_ps_ops.algorithms import QAdam

    r = hvd.rank()
    directory = tempfile.mkdtemp(prefix="tfps_algorithm_ckpt.")
    try:
        x = np.random.default_rng(20 + r).normal(size=(16, 8)).astype(np.float32)
        y = np.random.default_rng(30 + r).normal(size=(16, 1)).astype(np.float32)

        def make():
            keras.utils.set_random_seed(5)
            model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
            algorithm = QAdam(warmup_steps=2)
            opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), algorithm=algorithm)
            return model, opt, algorithm

        model, opt, algorithm = make()
        for _ in range(3):  # 2 warm-up steps, then one compressed
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            variables = model.trainable_variables
            opt.apply(tape.gradient(loss, variables), variables)
        path = tf.train.Checkpoint(optimizer=opt).save(os.path.join(directory, "ckpt"))

        model2, opt2, restored = make()
        status = tf.train.Checkpoint(optimizer=opt2).restore(path)
        restored.attach(opt2)
        restored.ensure_built(model2.trainable_variables, algorithm._keys)
        status.assert_existing_objects_matched()
        assert int(restored.step_count.numpy()) == 3
        for saved, back in zip(algorithm.m + algorithm.v, restored.m + restored.v):
            assert np.abs(saved.numpy()).max() > 0
            np.testing.assert_array_equal(saved.numpy(), back.numpy())
    finally:
        shutil.rmtree(directory, ignore_errors=True)


CHECKS = [check_low_precision_state_round_trip,
          check_qadam_state_round_trip_through_the_optimizer]

if __name__ == "__main__":
    run_checks(CHECKS)

"""Worker for test_compression.py's TensorFlow half: push_pull with each core codec
through the TF op (checked against tests/codec_reference.py), dtypes the codecs do not
take, and training with int8 (DistributedGradientTape and Keras fit) whose loss decreases.
"""

import os
import sys

import keras
import numpy as np
import tensorflow as tf

from harness import run_checks
from train_worker import BATCH, dataset, keras_model, shard, tape_variables, train_with_tape

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import codec_reference as ref  # noqa: E402

N = 3001  # one partition (default TFPS_PARTITION_BYTES), three chunks, the last partial


def inputs(rank, name):
    rng = np.random.default_rng([rank, sum(map(ord, name))])
    return (rng.standard_normal(N) * (1 + rank)).astype(np.float32)


def expected(name, codec, ratio, size):
    """The first call's result: no error feedback memory yet on either side."""
    from native import load_core  # the core's key and seed: the same on every worker

    core = load_core()
    k = ref.sparse_k(ratio, N) if codec in ("topk", "randomk") else 0
    seed = ref.randomk_seed(core.key_of_name(name), 0, 1)
    total = sum(ref.round_trip(codec, inputs(r, name), k, seed) for r in range(size))
    return ref.round_trip(codec, total.astype(np.float32), k, seed)


def check_codecs_through_the_op(hvd):
    C = hvd.Compression
    for compressor, codec, ratio in [(C.fp16, "fp16", 1), (C.bf16, "bf16", 1),
                                     (C.int8, "int8", 1), (C.onebit, "onebit", 1),
                                     (C.topk(0.05), "topk", 0.05),
                                     (C.randomk(0.1), "randomk", 0.1)]:
        name = f"tf.codec.{codec}"
        got = hvd.push_pull(tf.constant(inputs(hvd.rank(), name)), average=False, name=name,
                            compression=compressor).numpy()
        want = expected(name, codec, ratio, hvd.size())
        # int8: float sums in another order may move a code by one step of its chunk.
        atol = max(np.ptp(want[c:c + 1024]) for c in range(0, N, 1024)) / 250 \
            if codec == "int8" else 1e-4
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=atol, err_msg=codec)


def check_other_dtypes(hvd):
    size, me = hvd.size(), hvd.rank()
    ints = hvd.push_pull(tf.constant([me, 70000], tf.int64), average=False,
                         compression=hvd.Compression.int8)
    np.testing.assert_array_equal(ints, [size * (size - 1) // 2, 70000 * size])
    # float64 goes through float32 and the codec, and comes back as float64.
    doubles = hvd.push_pull(tf.constant([0.5, 1.0], tf.float64), average=True,
                            compression=hvd.Compression.fp16)
    assert doubles.dtype == tf.float64
    np.testing.assert_array_equal(doubles, [0.5, 1.0])


def mse(variables, x, ids, y):
    features = tf.concat([x, tf.gather(variables["table"], ids)], axis=1)
    return float(tf.reduce_mean((features @ variables["kernel"] + variables["bias"] - y) ** 2))


def check_tape_training_with_int8_and_onebit(hvd):
    x, ids, y = dataset()
    me = hvd.rank()
    for compressor in (hvd.Compression.int8, hvd.Compression.onebit):
        variables = tape_variables(seed=0)
        before = mse(variables, x, ids, y)
        wrap = lambda tape: hvd.DistributedGradientTape(tape, compression=compressor)  # noqa
        steps = len(x) // (hvd.size() * BATCH)
        train_with_tape(variables, shard(x, me, steps), shard(ids, me, steps),
                        shard(y, me, steps), BATCH, wrap)
        after = mse(variables, x, ids, y)
        print(f"tape {compressor.wire}: loss {before:.4f} -> {after:.4f}", flush=True)
        assert after < 0.5 * before, (compressor, before, after)


def check_keras_fit_with_int8(hvd):
    x, _, y = dataset()
    me = hvd.rank()
    model = keras_model(seed=100)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9),
                                                     compression=hvd.Compression.int8),
                  loss="mse")
    steps = len(x) // (hvd.size() * BATCH)
    history = model.fit(shard(x, me, steps), shard(y, me, steps), batch_size=BATCH, epochs=3,
                        shuffle=False, verbose=0,
                        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    losses = history.history["loss"]
    print(f"fit int8: losses {losses}", flush=True)
    assert losses[-1] < 0.5 * losses[0], losses


CHECKS = [check_codecs_through_the_op, check_other_dtypes,
          check_tape_training_with_int8_and_onebit, check_keras_fit_with_int8]

if __name__ == "__main__":
    run_checks(CHECKS)

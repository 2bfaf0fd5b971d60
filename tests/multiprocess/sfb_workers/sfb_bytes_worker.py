"""Worker for test_sfb.py's wire check (2 workers): one 4096×4096 layer at K=32.

Counts the bytes this worker puts on the wire per step for the layer's gradient, by SFB
(peer byte counter: its factors to the other worker) and by push_pull (bytes sent to the
servers: the dense gradient), and times both steps. Prints one `SFB_BENCH {json}` line.
"""

import ctypes
import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workers"))
from harness import run_checks  # noqa: E402

import sfb  # noqa: E402

M = N = 4096
K = 32
STEPS = 5


def counter(name):
    from tf_ps_ops.common import library as _library

    function = getattr(_library.c_api(), name)
    function.restype = ctypes.c_ulonglong
    return function


def measure(step, bytes_counter):
    step().numpy()  # trace and warm up
    before, start = bytes_counter(), time.perf_counter()
    for _ in range(STEPS):
        result = step().numpy()
    seconds = (time.perf_counter() - start) / STEPS
    return result, (bytes_counter() - before) / STEPS, seconds


def check_bytes_and_step_time(hvd):
    rng = np.random.default_rng(hvd.rank())
    x = tf.constant(rng.normal(size=(K, N)).astype(np.float32))
    dy = tf.constant(rng.normal(size=(K, M)).astype(np.float32))
    kernel = tf.Variable(tf.zeros([N, M]))
    by_sfb = tf.function(lambda: sfb.factor_gradient(dy, x, kernel.handle, "bench.sfb"))
    by_push_pull = tf.function(
        lambda: hvd.push_pull(tf.matmul(x, dy, transpose_a=True), name="bench.dense"))
    g_sfb, sfb_bytes, sfb_s = measure(by_sfb, counter("tfps_peer_bytes_sent"))
    g_dense, dense_bytes, dense_s = measure(by_push_pull, counter("tfps_bytes_sent"))
    np.testing.assert_allclose(g_sfb, g_dense, rtol=1e-4, atol=1e-4)
    print("SFB_BENCH " + json.dumps({
        "rank": hvd.rank(), "workers": hvd.size(), "M": M, "N": N, "K": K,
        "sfb_bytes_per_step_per_peer": sfb_bytes / (hvd.size() - 1),
        "dense_bytes_per_step": dense_bytes,
        "sfb_step_s": sfb_s, "push_pull_step_s": dense_s}), flush=True)
    expected = K * (M + N) * 4
    assert abs(sfb_bytes / (hvd.size() - 1) - expected) <= 0.1 * expected, (sfb_bytes, expected)


CHECKS = [check_bytes_and_step_time]

if __name__ == "__main__":
    run_checks(CHECKS)

"""One worker of the TensorFlow GPU checks (run_gpu_checks.sh starts two through tfps-run).

On GPU tensors, against oracles:
  push_pull, broadcast, allgather   NumPy sums / rank 0's value / concatenation
  push_pull op=Max                  NumPy's maximum (the GPU kernel honours reduce_op)
  the ops ran on the GPU            the outputs' device is a GPU
  SFB                               NumPy's rank-order float32 loop, bit for bit
  PS apply                          a GPU variable after one PS-mode SGD step: w - lr * mean(g)
  Keras fit                         two workers' fit with DistributedOptimizer on the GPU equal
                                    single-process fit on the concatenated batches
  staging overlap                   timed: a backward-like chain of GPU matmuls with a
                                    push_pull per layer, against the same chain alone and the
                                    push_pulls alone (printed, not asserted); the engine's
                                    timeline is written by TFPS_TIMELINE
Writes $TFPS_GPU_OUT/rank<r>.json: every check's result and the timings.
GPU_CHECKS_DEVICE=/CPU:0 runs the same checks on the CPU (a dry run of this script where
there is no GPU; the placement checks are then skipped).
"""

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

DEVICE = os.environ.get("GPU_CHECKS_DEVICE", "/GPU:0")
tf.config.threading.set_intra_op_parallelism_threads(2)
tf.config.threading.set_inter_op_parallelism_threads(2)
for gpu in tf.config.list_physical_devices("GPU"):
    tf.config.experimental.set_memory_growth(gpu, True)  # two workers share one GPU
# Full float32 matmuls: TF32 (TF's default on Ampere and newer) would round the fit's
# distributed and single-process batches differently.
tf.config.experimental.enable_tensor_float_32_execution(False)

import keras  # noqa: E402

from sfb.ops import factor_gradient  # noqa: E402
import tf_ps_ops as hvd  # noqa: E402
from tf_ps_ops import optimizers as ps_optimizers  # noqa: E402

RESULTS = {}


def check(name, ok, detail=""):
    RESULTS[name] = {"ok": bool(ok), "detail": detail}
    print("rank %d %s  %s %s" % (hvd.rank(), "PASS" if ok else "FAIL", name, detail), flush=True)


def on_gpu(t):
    return "GPU" in t.device.upper() or DEVICE.upper() != "/GPU:0"


def rank_data(rank, shape, seed):
    return np.random.default_rng(seed + 100 * rank).standard_normal(shape).astype(np.float32)


def check_collectives():
    size, rank = hvd.size(), hvd.rank()
    with tf.device(DEVICE):
        x = tf.constant(rank_data(rank, (1000, 33), 1))
        summed = hvd.allreduce(x, op=hvd.Sum, name="gpu.sum")
        gathered = hvd.allgather(tf.constant(rank_data(rank, (rank + 2, 5), 2)), name="gpu.ag")
        root = hvd.broadcast(tf.constant(rank_data(rank, (64,), 3)), root_rank=0,
                             name="gpu.bc")
        # The GPU kernel reads the op's attrs as the CPU one does (kernels/comm_attrs.h);
        # before, it ignored reduce_op and summed.
        largest = hvd.allreduce(tf.constant(rank_data(rank, (257,), 4)), op=hvd.Max,
                                name="gpu.max")
    want = sum(rank_data(r, (1000, 33), 1).astype(np.float64) for r in range(size))
    check("push_pull on GPU", on_gpu(summed) and np.allclose(summed.numpy(), want, atol=1e-4),
          summed.device)
    want = np.concatenate([rank_data(r, (r + 2, 5), 2) for r in range(size)])
    check("allgather on GPU", on_gpu(gathered) and np.array_equal(gathered.numpy(), want),
          gathered.device)
    check("broadcast on GPU", on_gpu(root) and np.array_equal(root.numpy(),
                                                              rank_data(0, (64,), 3)),
          root.device)
    want = np.max([rank_data(r, (257,), 4) for r in range(size)], axis=0)
    check("push_pull op=Max on GPU", on_gpu(largest) and np.array_equal(largest.numpy(), want),
          largest.device)


def numpy_rebuild(rows, m, n, divisor):
    g = np.zeros((n, m), rows.dtype)
    for k in range(rows.shape[0]):
        g = g + np.outer(rows[k, m:], rows[k, :m])
    return g / rows.dtype.type(divisor)


def check_sfb():
    size, rank = hvd.size(), hvd.rank()
    m, n = 48, 80
    k = [5 + 3 * r for r in range(size)]
    with tf.device(DEVICE):
        w = tf.Variable(tf.zeros((n, m)))
        u = tf.constant(rank_data(rank, (k[rank], m), 4))
        v = tf.constant(rank_data(rank, (k[rank], n), 5))
        g = factor_gradient(u, v, w.handle, name="gpu.sfb")
    rows = np.concatenate([np.concatenate([rank_data(r, (k[r], m), 4),
                                           rank_data(r, (k[r], n), 5)], axis=1)
                           for r in range(size)])
    want = numpy_rebuild(rows, m, n, size)
    same = np.array_equal(g.numpy().view(np.uint32), want.view(np.uint32))
    check("SFB rebuild on GPU, bit-identical to NumPy", on_gpu(g) and same, g.device)


def check_ps_apply():
    size, rank = hvd.size(), hvd.rank()
    init = np.linspace(-1, 1, 300).astype(np.float32).reshape(30, 10)
    with tf.device(DEVICE):
        var = keras.Variable(init if rank == 0 else np.zeros_like(init), name="gpu_ps_w")
        opt = ps_optimizers.SGD(0.1)
        grad = tf.constant(rank_data(rank, (30, 10), 6))
        opt.apply_gradients([(grad, var)])
    mean = np.mean([rank_data(r, (30, 10), 6) for r in range(size)], axis=0)
    want = init - np.float32(0.1) * mean
    got = var.numpy()
    check("PS apply (SGD) of a GPU variable", np.allclose(got, want, atol=1e-6),
          "%s max |diff| %g" % (var.value.device, np.max(np.abs(got - want))))


STEPS, BATCH = 12, 16


def fit_data(size):
    rng = np.random.default_rng(99)
    x = rng.standard_normal((STEPS * size * BATCH, 20)).astype(np.float32)
    y = (x @ rng.standard_normal((20, 1)).astype(np.float32)).astype(np.float32)
    return x, y


def model(seed=3):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((20,)), keras.layers.Dense(32, activation="tanh"),
                             keras.layers.Dense(1)])


def check_fit():
    size, rank = hvd.size(), hvd.rank()
    x, y = fit_data(size)
    # Global batch s is rows [s*size*BATCH, (s+1)*size*BATCH); rank r takes its r-th slice.
    xs = x.reshape(STEPS, size, BATCH, 20)[:, rank].reshape(-1, 20)
    ys = y.reshape(STEPS, size, BATCH, 1)[:, rank].reshape(-1, 1)
    with tf.device(DEVICE):
        dist = model()
        dist.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)),
                     loss="mse", jit_compile=False)
        dist.fit(xs, ys, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        single = model()
        single.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", jit_compile=False)
        single.fit(x, y, batch_size=size * BATCH, epochs=1, shuffle=False, verbose=0)
    diffs = [float(np.max(np.abs(a - b))) for a, b in zip(dist.get_weights(),
                                                          single.get_weights())]
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(single.get_weights(),
                                                              model().get_weights()))
    check("2-worker Keras fit on GPU equals single-process fit", max(diffs) < 1e-4 and moved > 1e-3,
          "max |diff| %g (the weights moved by %g)" % (max(diffs), moved))


def timed(fn, reps=5):
    fn()  # trace and warm up
    best = 1e9
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def measure_overlap():
    layers, dim = 8, int(os.environ.get("GPU_CHECKS_OVERLAP_DIM", "2048"))
    with tf.device(DEVICE):
        weights = [tf.Variable(tf.random.normal((dim, dim), seed=i) * 0.01) for i in range(layers)]
        act = tf.random.normal((dim, dim), seed=99)

    def chain(communicate, compute=True):
        @tf.function
        def step():
            h = act
            outs = []
            for i, w in enumerate(weights):
                if compute:
                    for _ in range(4):
                        h = tf.tanh(h @ w)  # the layer's "backward" work
                g = h if compute else w.read_value()
                if communicate:
                    outs.append(hvd.allreduce(g, op=hvd.Sum, name="overlap.%d" % i,
                                              _variable=w))
            return [tf.reduce_sum(o) for o in outs] + [tf.reduce_sum(h)]
        return lambda: [t.numpy() for t in step()]

    compute_ms = timed(chain(False))
    comm_ms = timed(chain(True, compute=False))
    both_ms = timed(chain(True))
    hidden = (compute_ms + comm_ms - both_ms) / max(1e-9, min(compute_ms, comm_ms))
    RESULTS["overlap"] = dict(layers=layers, mb_per_layer=dim * dim * 4 / 2**20,
                              compute_ms=compute_ms, push_pull_ms=comm_ms, both_ms=both_ms,
                              fraction_of_shorter_hidden=hidden)
    print("rank %d TIMING  staging overlap: %d layers x %.0f MB: compute %.1f ms, push_pulls "
          "%.1f ms, both %.1f ms: %.0f%% of the shorter hidden" % (
              hvd.rank(), layers, dim * dim * 4 / 2**20, compute_ms, comm_ms, both_ms,
              100 * hidden), flush=True)


def main():
    hvd.init()
    if DEVICE.upper() == "/GPU:0" and not tf.config.list_physical_devices("GPU"):
        check("TensorFlow sees a GPU", False, "tf.config.list_physical_devices('GPU') is empty")
    else:
        for name, fn in (("collectives", check_collectives), ("sfb", check_sfb),
                         ("ps apply", check_ps_apply), ("fit", check_fit),
                         ("overlap", measure_overlap)):
            try:
                fn()
            except Exception as e:  # one failure must not hide the others
                check(name + " raised", False, "%s: %s" % (type(e).__name__, str(e)[:500]))
    out = os.environ.get("TFPS_GPU_OUT", ".")
    with open(os.path.join(out, "rank%d.json" % hvd.rank()), "w") as f:
        json.dump(RESULTS, f, indent=1)
    hvd.shutdown()
    return 0 if all(r["ok"] for r in RESULTS.values() if "ok" in r) else 1


if __name__ == "__main__":
    sys.exit(main())

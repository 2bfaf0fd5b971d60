"""A TensorFlow-free worker for the multi-host smoke test: push_pulls a few tensors,
small and 8 MB, and checks every sum against NumPy (each rank regenerates the others'
data from their seeds). Exits 0 and prints "ok" on success, 4 on a wrong sum.
"""

import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # no idle BLAS threads competing for CPU
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from native import init_from_env, load_core  # noqa: E402

CASES = [  # name, shape, dtype
    ("scalar", (), np.float32),
    ("small", (3, 5), np.float32),
    ("ints", (1000,), np.int32),
    ("f64", (257,), np.float64),
    ("big", (2 << 20,), np.float32),  # 8 MB: two partitions, one per server
]
STEPS = 3


def data(rank, step, shape, dtype):
    rng = np.random.default_rng(1000 * rank + step)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-1000, 1000, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def main():
    core = load_core()
    rank, size = init_from_env(core)
    for step in range(STEPS):
        for name, shape, dtype in CASES:
            got = core.push_pull(name, data(rank, step, shape, dtype))
            expected = sum(data(r, step, shape, dtype) for r in range(size))
            if got.shape != expected.shape or got.dtype != expected.dtype or not np.allclose(
                    got, expected, rtol=1e-6, atol=1e-6):
                print("step %d, %s: wrong sum: got %r, expected %r"
                      % (step, name, got.ravel()[:4], expected.ravel()[:4]), file=sys.stderr)
                sys.exit(4)
    stats = core.stats()
    core.shutdown()
    print("ok", stats["bytes_sent"], stats["bytes_received"])


if __name__ == "__main__":
    main()

"""A worker without TensorFlow for test_io_threads.py: push_pulls tensors of several dtypes
and sizes (one spans several partitions, so both servers) and checks each sum against
NumPy bit for bit; prints how many ZeroMQ I/O threads its process runs.

    io_threads_worker.py WAIT_FILE

Prints "io threads N" and "sums ok", then waits for WAIT_FILE before it shuts down (the
test counts the servers' threads meanwhile). On a wrong sum it exits 4.
"""

import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from native import init_from_env, load_core  # noqa: E402

CASES = [("small", np.float32, 1000), ("spans", np.float32, 700_000),
         ("doubles", np.float64, 50_000), ("ints", np.int32, 3001)]


def io_thread_count(pid="self"):
    tasks = Path(f"/proc/{pid}/task")
    return sum((t / "comm").read_text().startswith("ZMQbg/IO") for t in tasks.iterdir())


def tensor(rank, dtype, n):
    rng = np.random.default_rng(rank)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-1000, 1000, n).astype(dtype)
    return rng.standard_normal(n).astype(dtype)


def main():
    core = load_core()
    rank, size = init_from_env(core)
    print(f"io threads {io_thread_count()}", flush=True)
    for step in range(2):
        for name, dtype, n in CASES:
            got = core.push_pull(name, tensor(rank + step, dtype, n))
            expected = tensor(step, dtype, n)
            for r in range(1, size):  # two workers: a + b is exact in any order
                expected = expected + tensor(r + step, dtype, n)
            if got.dtype != expected.dtype or not np.array_equal(got, expected):
                print(f"{name} step {step}: the sum differs from NumPy's", file=sys.stderr)
                sys.exit(4)
    print("sums ok", flush=True)
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.02)
    core.shutdown()


if __name__ == "__main__":
    main()

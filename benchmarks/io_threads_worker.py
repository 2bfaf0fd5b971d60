"""One worker of benchmarks/io_threads.py: the pybind11 core only (no TensorFlow).

    io_threads_worker.py DIR MIB ITERATIONS

Warms up, writes DIR/warm.RANK, waits for DIR/go (the driver has read every process's CPU
time), runs ITERATIONS push_pulls of a float32 tensor of MIB MiB, checks the last sum
against NumPy, writes its wall time to DIR/done.RANK and waits for DIR/end before it
shuts down (so the CPU the driver reads after `done` is that of the timed loop only).
"""

import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from native import init_from_env, load_core  # noqa: E402


def wait_for(path, timeout_s=300):
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            sys.exit(f"worker: {path} never appeared")
        time.sleep(0.01)


def main():
    work, mib, iterations = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    core = load_core()
    rank, size = init_from_env(core)
    x = np.arange(mib << 18, dtype=np.float32) % 1021 + rank
    for _ in range(2):
        core.push_pull("io", x)
    expected = size * (np.arange(mib << 18, dtype=np.float32) % 1021) + sum(range(size))
    (work / f"warm.{rank}").write_text("")
    wait_for(work / "go")
    start = time.perf_counter()
    for _ in range(iterations):
        got = core.push_pull("io", x)
    elapsed = time.perf_counter() - start
    if not np.array_equal(got, expected):
        sys.exit(f"worker {rank}: the sum differs from NumPy's")
    (work / f"done.{rank}").write_text(repr(elapsed))
    wait_for(work / "end")
    core.shutdown()


if __name__ == "__main__":
    main()

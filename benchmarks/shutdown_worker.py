"""A core worker (no TensorFlow) for benchmarks/shutdown_time.py: an allgather (which
connects the peer mesh), a push_pull every worker waits on, then shutdown(), timed.
Prints "shutdown SECONDS"."""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from native import init_from_env, load_core  # noqa: E402


def main():
    core = load_core()
    rank, size = init_from_env(core)
    parts = core.allgather("ranks", np.array([rank], np.int32))
    assert [int(p[0]) for p in parts] == list(range(size)), parts
    got = core.push_pull("barrier", np.ones(1, np.float32))
    assert got[0] == size, got
    started = time.monotonic()
    core.shutdown()
    print(f"shutdown {time.monotonic() - started:.3f}", flush=True)


if __name__ == "__main__":
    main()

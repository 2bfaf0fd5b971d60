"""A worker without TensorFlow: each step, TENSORS small push_pulls started one after
another, GAP seconds apart, from threads of their own (as a step's backward hands over
gradients), every sum checked against NumPy; prints the engine's message counts at the end
as "stats {...}" (JSON). With TFPS_CYCLE_US longer than the step's spread, each server's
partitions of a step leave as one batch; without, each leaves in the engine turn it
arrives in.

    cycle_worker.py STEPS
"""

import json
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from native import init_from_env, load_core  # noqa: E402

TENSORS = 8
GAP = 0.005


def value(index, rank, step):
    return (np.arange(16 + index, dtype=np.float32) % 5 + 10 * step + rank + index)


def main():
    steps = int(sys.argv[1])
    core = load_core()
    failures = []

    def one(index, rank, size, step):
        try:
            got = core.push_pull(f"cycle.{index}", value(index, rank, step))
        except RuntimeError as e:
            failures.append(f"step {step}: cycle.{index}: {e}")
            return
        expected = sum(value(index, r, step) for r in range(size))
        if not np.array_equal(got, expected):
            failures.append(f"step {step}: cycle.{index} differs from NumPy")

    try:
        rank, size = init_from_env(core)
        for step in range(steps):
            threads = []
            for index in range(TENSORS):
                threads.append(threading.Thread(target=one, args=(index, rank, size, step)))
                threads[-1].start()
                time.sleep(GAP)
            for thread in threads:
                thread.join()
            if failures:
                print("\n".join(failures), file=sys.stderr, flush=True)
                sys.exit(4)
            print(f"step {step} ok", flush=True)
        print("stats " + json.dumps(core.stats()), flush=True)
        core.shutdown()
    except RuntimeError as e:
        print(f"push_pull failed: {e}", file=sys.stderr, flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main()

"""A worker without TensorFlow (the pybind11 core only, so it starts in a fraction of a
second): push_pulls a tensor in a loop and checks every sum against NumPy.

    loop_worker.py STEPS [--stall-at N] [--wait-for FILE]

Prints "step N ok" after each step; on an error prints it to stderr and exits 3.
--stall-at N: stop calling push_pull after N steps (sleep), like a stuck worker.
--wait-for FILE: after the first step, wait until FILE exists, then do the rest.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from native import init_from_env, load_core  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("steps", type=int)
    parser.add_argument("--stall-at", type=int, default=-1)
    parser.add_argument("--wait-for")
    args = parser.parse_args()
    core = load_core()
    try:
        rank, size = init_from_env(core)
        for step in range(args.steps):
            if step == args.stall_at:
                print("stalling", flush=True)
                time.sleep(3600)
            x = np.full(3000, rank + step, np.float32)
            got = core.push_pull("loop", x)
            expected = sum(r + step for r in range(size))
            if not np.all(got == expected):
                print(f"step {step}: got {got[:3]}, expected {expected}", file=sys.stderr)
                sys.exit(4)
            print(f"step {step} ok", flush=True)
            if step == 0 and args.wait_for:
                while not os.path.exists(args.wait_for):
                    time.sleep(0.05)
            time.sleep(0.02)
        core.shutdown()
    except RuntimeError as e:
        print(f"push_pull failed: {e}", file=sys.stderr, flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main()

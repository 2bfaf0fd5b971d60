"""A worker without TensorFlow: two ranks on one host (TFPS_HIERARCHICAL=1) go out of step
and must recover, as on the flat path.

    out_of_step_worker.py WAIT_S

For each lone rank L in (0, 1) (the local leader, then the member): rank L calls
push_pull('x') alone, which must fail (TFPS_STALL_SHUTDOWN, set below WAIT_S); the other rank
sleeps WAIT_S meanwhile. Then both call 'x' three times and every answer must equal
NumPy's sum of both ranks' inputs. Prints "phase L ok"; on an error exits 3 or 4.
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from native import init_from_env, load_core  # noqa: E402


def data(rank, phase, step):
    return np.random.default_rng(100 * phase + 10 * (step + 1) + rank).standard_normal(1001)


def main():
    wait_s = float(sys.argv[1])
    core = load_core()
    rank, size = init_from_env(core)
    assert size == 2 and core.local_size() == 2, (size, core.local_size())
    for lone in (0, 1):
        if rank == lone:
            try:
                core.push_pull("x", data(rank, lone, -1))
            except RuntimeError as e:
                print(f"lone call failed as expected: {e}", flush=True)
            else:
                print("the lone call succeeded", file=sys.stderr)
                sys.exit(4)
        else:
            time.sleep(wait_s)
        for step in range(3):
            try:
                got = core.push_pull("x", data(rank, lone, step))
            except RuntimeError as e:
                print(f"phase {lone} step {step}: push_pull failed: {e}", file=sys.stderr)
                sys.exit(3)
            want = data(0, lone, step) + data(1, lone, step)
            if got.tobytes() != want.tobytes():
                print(f"phase {lone} step {step}: got {got[:3]}, expected {want[:3]}",
                      file=sys.stderr)
                sys.exit(4)
        print(f"phase {lone} ok", flush=True)
    core.shutdown()


if __name__ == "__main__":
    main()

"""A worker without TensorFlow (the pybind11 core only) for test_server_push_budget.py:
rank 1 first push_pulls FLOOD distinct 1 MiB tensors at once that rank 0 never pushes (a
worker far ahead of the others, or a hostile one), then both push_pull one tensor for
STEPS steps, checking every sum against NumPy.

    flood_worker.py FLOOD STEPS GO_FILE START_FILE

Rank 1 prints "ready" and waits for START_FILE, then prints "flooding", then "flood failed: ..." when its push_pulls have failed (refused
by the server's TFPS_SERVER_PUSH_BYTES, or timed out waiting for rank 0), and creates
GO_FILE; rank 0 waits for GO_FILE. Both print "step N ok"; on a wrong sum they exit 4, on
an error of the loop 3.
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from native import init_from_env, load_core  # noqa: E402


def main():
    flood, steps, go, start = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    core = load_core()
    rank, size = init_from_env(core)
    if rank == 1:
        ahead = np.ones((1 << 20) // 4, np.float32)
        print("ready", flush=True)
        while not os.path.exists(start):
            time.sleep(0.05)
        print("flooding", flush=True)
        try:
            core.push_pull_group([f"ahead{i}" for i in range(flood)], [ahead] * flood)
            print("the flood was answered", flush=True)
            sys.exit(5)
        except RuntimeError as e:
            print(f"flood failed: {e}", flush=True)
        open(go, "w").close()
    else:
        while not os.path.exists(go):
            time.sleep(0.05)
    try:
        for step in range(steps):
            x = np.random.default_rng(step * size + rank).standard_normal(100_000)
            x = x.astype(np.float32)
            got = core.push_pull("after", x)
            want = sum(np.random.default_rng(step * size + r).standard_normal(100_000)
                       .astype(np.float32) for r in range(size))
            if not np.array_equal(got, want):
                print(f"step {step}: got {got[:3]}, expected {want[:3]}", file=sys.stderr)
                sys.exit(4)
            print(f"step {step} ok", flush=True)
        core.shutdown()
    except RuntimeError as e:
        print(f"push_pull failed: {e}", file=sys.stderr, flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main()

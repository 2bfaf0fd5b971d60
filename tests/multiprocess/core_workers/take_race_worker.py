"""A worker without TensorFlow: three ranks on one host (TFPS_HIERARCHICAL=1), and the
local leader's first take of the members' inputs pauses (pause_next_local_take_for_testing)
after taking local rank 1's for PAUSE_S, longer than TFPS_STALL_SHUTDOWN: both members' waits time
out meanwhile, local rank 1's with its input taken, local rank 2's with it untaken.

    take_race_worker.py PAUSE_S CALLS

Every rank calls push_pull('x') CALLS times (local rank 2, whose withdrawn input leaves it
one step behind, once more), each with its own input, straight after the
previous call returned or failed. Prints one line per call: "call C ok SHA" (the answer's
bytes hashed) or "call C failed: ..."; the answers are judged by the test, which knows
every input. Exits 3 on a failure other than a timeout of the local step.
"""

import hashlib
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from native import init_from_env, load_core  # noqa: E402

COUNT = 4099


def data(rank, call):
    return np.random.default_rng(1000 * rank + call).standard_normal(COUNT).astype(np.float32)


def main():
    pause_s, calls = float(sys.argv[1]), int(sys.argv[2])
    core = load_core()
    if os.environ["TFPS_RANK"] == "0":
        core.pause_next_local_take_for_testing(pause_s)
    rank, size = init_from_env(core)
    assert size == 3 and core.local_size() == 3, (size, core.local_size())
    for call in range(calls + (1 if rank == 2 else 0)):
        try:
            got = core.push_pull("x", data(rank, call))
        except RuntimeError as e:
            print(f"call {call} failed: {e}", flush=True)
            if "DEADLINE_EXCEEDED" not in str(e) and "DeadlineExceeded" not in str(e):
                sys.exit(3)
            continue
        print(f"call {call} ok {got.tobytes().hex()}", flush=True)
    core.shutdown()


if __name__ == "__main__":
    main()

"""A worker without TensorFlow that starts several push_pulls of one tensor at once
(push_pull_group with the name repeated): steps 1..N of the key are in flight together, so
while step 1's shared-memory segment is still in use (its answer has not come), the later
steps' partitions must go over the socket (TFPS_SHM_SERVER). Checks every answer against
NumPy bit for bit (2 workers: a + b in either order) and prints "stats {json}".

    shm_busy_worker.py ROUNDS REPEATS
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from native import init_from_env, load_core  # noqa: E402

COUNT = 1_000_003  # 4 MB of float32: several 512 KB partitions over both servers


def data(rank, round_, i):
    rng = np.random.default_rng(10_000 * round_ + 100 * i + rank)
    return rng.standard_normal(COUNT).astype(np.float32)


def main():
    rounds, repeats = int(sys.argv[1]), int(sys.argv[2])
    core = load_core()
    try:
        rank, size = init_from_env(core)
        assert size == 2, size
        for r in range(rounds):
            got = core.push_pull_group(["g"] * repeats,
                                       [data(rank, r, i) for i in range(repeats)])
            for i in range(repeats):
                want = data(0, r, i) + data(1, r, i)
                if got[i].tobytes() != want.tobytes():
                    print(f"round {r} call {i}: got {got[i][:3]}, expected {want[:3]}",
                          file=sys.stderr, flush=True)
                    sys.exit(4)
        print("stats " + json.dumps(core.stats()), flush=True)
        core.shutdown()
    except RuntimeError as e:
        print(f"push_pull failed: {e}", file=sys.stderr, flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main()

"""A worker without TensorFlow: each step push_pulls 8 float32 tensors of 4096 elements
started together, compressed with fp16 (the job default, TFPS_COMPRESSION=fp16: 8 KiB on
the wire for 16 KiB of float32), and checks the sums (small integers: exact in fp16).
Prints the engine's message counts as "stats {...}" (JSON), over the timed steps only.

    codec_fusion_worker.py STEPS
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from native import init_from_env, load_core  # noqa: E402

TENSORS, N = 8, 4096


def value(i, rank, step):
    return ((np.arange(N) + i + step) % 13 + rank).astype(np.float32)


def main():
    steps = int(sys.argv[1])
    core = load_core()
    rank, size = init_from_env(core)
    names = [f"fuse{i}" for i in range(TENSORS)]
    before = core.stats()
    for step in range(steps):
        got = core.push_pull_group(names, [value(i, rank, step) for i in range(TENSORS)])
        for i, out in enumerate(got):
            expected = sum(value(i, r, step) for r in range(size))
            if not np.array_equal(out, expected):
                sys.exit(f"step {step}: fuse{i} differs from NumPy")
    after = core.stats()
    print("stats " + json.dumps({k: after[k] - before[k] for k in after}), flush=True)
    core.shutdown()


if __name__ == "__main__":
    main()

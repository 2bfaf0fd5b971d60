"""A worker without TensorFlow: push_pulls groups of tensors started together (small and
large, several dtypes) and checks every sum against NumPy; prints the engine's message
counts at the end as "stats {...}" (JSON).

    group_worker.py STEPS [--reverse-odd]

--reverse-odd: odd ranks hand the tensors over in the opposite order, so workers start
them in different orders (as wait-free backprop can).
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from native import init_from_env, load_core  # noqa: E402

# (name, shape, dtype): 40 small tensors around the fusion threshold and two large ones.
TENSORS = [(f"bias{i}", (1 + 37 * i,), [np.float32, np.float64, np.int32, np.float16][i % 4])
           for i in range(40)]
TENSORS += [("big0", (300, 700), np.float32), ("big1", (90000,), np.float64), ("empty", (0,), np.float32)]


def value(name, shape, dtype, rank, step):
    seed = sum(map(ord, name)) + 1000 * step
    base = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) % 17
    return (base + seed % 7 + rank).astype(dtype)


def main():
    steps = int(sys.argv[1])
    reverse = "--reverse-odd" in sys.argv[2:]
    core = load_core()
    try:
        rank, size = init_from_env(core)
        for step in range(steps):
            tensors = TENSORS[::-1] if reverse and rank % 2 == 1 else TENSORS
            names = [t[0] for t in tensors]
            arrays = [value(n, s, d, rank, step) for n, s, d in tensors]
            got = core.push_pull_group(names, arrays)
            for (name, shape, dtype), out in zip(tensors, got):
                expected = sum(value(name, shape, dtype, r, step) for r in range(size))
                if out.dtype != dtype or out.shape != shape or not np.array_equal(out, expected):
                    print(f"step {step}: {name} differs from NumPy", file=sys.stderr)
                    sys.exit(4)
            print(f"step {step} ok", flush=True)
        print("stats " + json.dumps(core.stats()), flush=True)
        core.shutdown()
    except RuntimeError as e:
        print(f"push_pull failed: {e}", file=sys.stderr, flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main()

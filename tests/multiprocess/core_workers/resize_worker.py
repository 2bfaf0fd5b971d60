"""A worker without TensorFlow: the local workers of one host (TFPS_HIERARCHICAL=1) call
push_pull under one name with another size or dtype at (nearly) every call, as the Horovod
shim's eager allreduces do ('push_pull.eager'); every answer must equal, bit for bit,
NumPy's sum of the ranks' inputs in rank order.

    resize_worker.py NAME [DISAGREE_AT [reshape]]

DISAGREE_AT: at that call, local rank 1 sends one element more (with "reshape": as many
elements in another shape); every rank must fail that call with FailedPrecondition naming
the tensor (printing "call C disagreed"), and the next calls must still sum exactly (no
rank left a step behind).

After the calls and a barrier (a push_pull of another name), prints "left N": how many
/dev/shm segments of NAME's key are still linked (each is unlinked once mapped). Prints
"resize ok" at the end; on an error prints it to stderr and exits 3.
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from native import init_from_env, load_core  # noqa: E402

# int16 is not aggregated locally: those calls of the name go flat, between local ones.
SHAPES = [(17, np.float32), (4099, np.float32), (33, np.int16), (4099, np.float32),
          (3, np.float64), (0, np.float32), (5000, np.int32), (17, np.float32), (9, np.int64),
          (33, np.int16), (4099, np.float32)]


def data(rank, call, disagree_at=-1, reshape=False):
    count, dtype = SHAPES[call]
    if call == disagree_at and rank == 1 and not reshape:
        count += 1
    rng = np.random.default_rng(100 * call + rank)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        out = rng.integers(info.min, info.max, count, dtype=dtype)  # sums wrap around
    else:
        out = rng.standard_normal(count).astype(dtype)
    return out.reshape(50, -1) if call == disagree_at and rank == 1 and reshape else out


def main():
    name = sys.argv[1]
    disagree_at = int(sys.argv[2]) if len(sys.argv) > 2 else -1
    reshape = sys.argv[3:] == ["reshape"]
    core = load_core()
    rank, size = init_from_env(core)
    assert core.local_size() == size, (size, core.local_size())
    for call in range(len(SHAPES)):
        try:
            got = core.push_pull(name, data(rank, call, disagree_at, reshape))
        except RuntimeError as e:
            if call == disagree_at and "FailedPrecondition" in str(e) and name in str(e):
                print(f"call {call} disagreed: {e}", flush=True)
                continue
            print(f"call {call} {SHAPES[call]}: push_pull failed: {e}", file=sys.stderr)
            sys.exit(3)
        if call == disagree_at:
            print(f"call {call}: the disagreement went unnoticed", file=sys.stderr)
            sys.exit(3)
        want = data(0, call)
        for other in range(1, size):
            want = want + data(other, call)
        if got.dtype != want.dtype or got.tobytes() != want.tobytes():
            print(f"call {call} {SHAPES[call]}: got {got[:3]}, expected {want[:3]}",
                  file=sys.stderr)
            sys.exit(3)
    core.push_pull(name + " barrier", np.ones(1, np.float32))
    key = f"{core.key_of_name(name):016x}"
    left = [p for p in os.listdir("/dev/shm") if p.startswith("tfps-") and f"-{key}-" in p]
    print(f"left {len(left)}", flush=True)
    core.shutdown()
    print("resize ok", flush=True)


if __name__ == "__main__":
    main()

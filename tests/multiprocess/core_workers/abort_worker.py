"""A worker without TensorFlow for test_hierarchical_abort.py: one rank aborts its call of
'x' (abort_collective: what PsAbortCollective enqueues when a collective raised in Python
on that rank only) while the others push. Every other rank must fail that call with
FailedPrecondition naming the aborting worker and its reason (the test's TFPS_TIMEOUT is
far above its own limit: waiting it out fails the test), and the next calls must give
NumPy's exact sum on every rank.

    abort_worker.py COUNT ABORTERS [LINGER_S]

COUNT: elements of the float32 tensor 'x' (several partitions over the servers with the
test's TFPS_PARTITION_BYTES). ABORTERS: comma-separated ranks that abort, one after
another. LINGER_S: seconds to stay up at the end (for the servers' round timeouts).
Prints "abort by R ok" after each round and "all ok" at the end; exits 3 on a failure.
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from native import init_from_env, load_core  # noqa: E402

REASON = "ValueError: op=Average of a bool tensor"


def data(rank, call, count):
    return np.random.default_rng(100 * call + rank).standard_normal(count).astype(np.float32)


def fail(text):
    print(text, file=sys.stderr, flush=True)
    sys.exit(3)


def main():
    count, aborters = int(sys.argv[1]), [int(r) for r in sys.argv[2].split(",")]
    linger_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    core = load_core()
    rank, size = init_from_env(core)
    call = 0

    def summed():
        nonlocal call
        got = core.push_pull("x", data(rank, call, count))
        want = data(0, call, count)
        for other in range(1, size):
            want = want + data(other, call, count)
        call += 1
        if got.tobytes() != want.tobytes():
            fail(f"rank {rank} call {call - 1}: got {got[:3]}, expected {want[:3]}")

    summed()
    for aborter in aborters:
        if rank == aborter:
            core.abort_collective("x", REASON)
        else:
            try:
                core.push_pull("x", data(rank, call, count))
            except RuntimeError as error:
                text = str(error)
                if (not text.startswith("FailedPrecondition")
                        or f"worker {aborter} could not take part" not in text
                        or REASON not in text):
                    fail(f"rank {rank}: not the abort's error: {text}")
                print(f"rank {rank} got: {text}", flush=True)
            else:
                fail(f"rank {rank}: no error although rank {aborter} aborted")
        call += 1
        summed()
        summed()
        print(f"abort by {aborter} ok", flush=True)
    time.sleep(linger_s)
    core.shutdown()
    print("all ok", flush=True)


if __name__ == "__main__":
    main()

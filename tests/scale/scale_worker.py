"""A worker without TensorFlow for the scale tests and benchmarks/scale.py: every
collective the core offers, at any number of workers, checked bit for bit against NumPy.

    scale_worker.py STEPS [--timings FILE] [--hold SECONDS] [--no-join] [--nofile R:L]

Each step push_pulls a 4 KB and a 1 MB float32 tensor (one group, so they travel
together), broadcasts a 4 KB tensor from rank step % size, and allgathers a block whose
first dimension differs per rank. The float inputs are small integers, so every sum is
exact in any order the servers add it in: each answer must equal NumPy's sum byte for
byte. After the steps, ranks run uneven tails (rank % 3 more push_pulls) and join(); the
tails' sums count only the ranks still working, join() must return a rank of the longest
tail. --hold S: every rank sleeps S seconds after its first STEPS steps (a steady state
in which the benchmark reads /proc). --timings FILE: rank 0 writes JSON with wall-clock
marks (process start, init returned, first step done) and the median time of each
collective. --nofile R:L: rank R lowers its RLIMIT_NOFILE (soft and hard) to L before
init(), to check the descriptor budget's error. Prints "scale ok" at the end; on an error
prints it to stderr and exits 3.
"""

import argparse
import json
import os
import sys
import time

START = time.time()

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from native import init_from_env, load_core  # noqa: E402

SMALL = 1024  # float32: 4 KB
LARGE = 262_144  # float32: 1 MB


MOD = 251


def base(count, step):
    return (np.arange(count, dtype=np.int64) * 7 + 13 * step) % MOD


def value(count, rank, step):
    """Rank `rank`'s input at `step`: integers below 251, so sums of up to 60,000 ranks
    stay exact in float32, whatever order they are added in."""
    return ((base(count, step) + rank) % MOD).astype(np.float32)


def summed(count, ranks, step):
    """NumPy's float32 sum of the inputs of `ranks`. An element's inputs depend only on
    its base value b (one of 251), so the sum is a table of 251 sums, looked up: the same
    numbers as adding `size` arrays, at the cost of one."""
    table = np.zeros(MOD, np.float32)
    b = np.arange(MOD, dtype=np.int64)
    for r in ranks:
        table += ((b + r) % MOD).astype(np.float32)
    return table[base(count, step)]


def fail(rank, text):
    print(f"rank {rank}: {text}", file=sys.stderr, flush=True)
    sys.exit(3)


def check(rank, what, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or got.tobytes() != want.tobytes():
        bad = np.flatnonzero(got.ravel() != want.ravel()) if got.shape == want.shape else []
        fail(rank, f"{what}: got {got.dtype}{got.shape}, expected {want.dtype}{want.shape}; "
                   f"first differing elements {list(bad[:5])}")


def block(rank, step):
    return np.full((1 + rank % 4, 8), rank * 1000 + step, np.int32)


def run_step(core, rank, size, step, times, allgather=True):
    t0 = time.perf_counter()
    small, large = core.push_pull_group(["small", "large"],
                                        [value(SMALL, rank, step), value(LARGE, rank, step)])
    t1 = time.perf_counter()
    root = step % size
    bcast = core.push_pull("bcast", value(SMALL, rank, step), root_rank=root)
    t2 = time.perf_counter()
    times["push_pull_4k_1m"].append(t1 - t0)
    times["broadcast_4k"].append(t2 - t1)
    everyone = range(size)
    check(rank, f"step {step} 'small'", small, summed(SMALL, everyone, step))
    check(rank, f"step {step} 'large'", large, summed(LARGE, everyone, step))
    check(rank, f"step {step} broadcast from {root}", bcast, value(SMALL, root, step))
    if not allgather:
        return
    parts = core.allgather("blocks", block(rank, step))
    times["allgather"].append(time.perf_counter() - t2)
    if len(parts) != size:
        fail(rank, f"step {step} allgather: {len(parts)} parts for {size} ranks")
    for r, part in enumerate(parts):
        check(rank, f"step {step} allgather part {r}", part, block(r, step))


def run_tail_and_join(core, rank, size, steps):
    """Uneven tails: rank r push_pulls 'small' r % 3 more times, then joins. (A name
    every rank has called before: under hierarchical aggregation a leader that joined
    first serves its members only names it has called.)"""
    tails = [r % 3 for r in range(size)]
    for t in range(tails[rank]):
        got = core.push_pull("small", value(SMALL, rank, steps + t))
        working = [r for r in range(size) if tails[r] > t]
        check(rank, f"tail {t} (ranks {len(working)} working)", got,
              summed(SMALL, working, steps + t))
    last = core.join()
    longest = [r for r in range(size) if tails[r] == max(tails)]
    if last not in longest:
        fail(rank, f"join() returned {last}, expected one of the longest tails {longest}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("steps", type=int)
    parser.add_argument("--timings")
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--no-join", action="store_true")
    parser.add_argument("--no-allgather", action="store_true",
                        help="push_pull and broadcast only: a job that never uses the peer mesh")
    parser.add_argument("--nofile", default="",
                        help="R:L: rank R lowers its RLIMIT_NOFILE (soft and hard) to L "
                             "descriptors before init")
    args = parser.parse_args()
    if args.nofile:
        who, limit = map(int, args.nofile.split(":"))
        if who == int(os.environ["TFPS_RANK"]):
            import resource
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    core = load_core()
    marks = {"start": START}
    times = {"push_pull_4k_1m": [], "broadcast_4k": [], "allgather": []}
    rank = os.environ.get("TFPS_RANK", "?")  # until init says
    try:
        rank, size = init_from_env(core)
        marks["init"] = time.time()
        print(f"local rank {core.local_rank()} of {core.local_size()}", flush=True)
        for step in range(args.steps):
            run_step(core, rank, size, step, times, allgather=not args.no_allgather)
            if step == 0:
                marks["first_step"] = time.time()
        marks["steps_done"] = time.time()
        if args.hold:
            time.sleep(args.hold)
        if not args.no_join:
            run_tail_and_join(core, rank, size, args.steps)
        marks["joined"] = time.time()
        stats = core.stats()
        core.shutdown()
    except RuntimeError as e:
        fail(rank, f"failed: {e}")
    if args.timings and rank == 0:
        # the first step pays for connections and first-use allocations: leave it out
        steady = {name: float(np.median(t[1:] or t)) for name, t in times.items() if t}
        with open(args.timings, "w") as f:
            json.dump({"marks": marks, "steady_s": steady, "stats": stats}, f)
    print("scale ok", flush=True)


if __name__ == "__main__":
    main()

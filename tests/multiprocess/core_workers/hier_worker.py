"""A worker without TensorFlow for hierarchical aggregation (TFPS_HIERARCHICAL): push_pulls
float32/float64/int32 tensors (and a float16 one and a broadcast, which stay flat), several
at once, and checks every answer against NumPy.

    hier_worker.py STEPS [--exact] [--digest FILE] [--die-at N] [--count-of-rank R:N]

--exact: float sums must equal, bit for bit, NumPy's float32/float64 sum of the ranks'
  arrays added one after another in rank order (what one host's local sum does);
  otherwise they must agree to float rounding.
--digest FILE: writes the SHA-256 of every answer's bytes (rank 0), to compare runs.
--die-at N: rank size-1 kills itself (SIGKILL) instead of calling step N.
--count-of-rank R:N: rank R uses N elements for 'f32' (a shape mismatch).
--only NAME: push_pull only that tensor (no checks).
--shrink-at N: before step N, every rank but local rank 0 tries to ftruncate each
  tf_ps_ops memfd it has mapped (/proc/self/map_files: root) to 0, as a hostile local
  worker would, and prints "shrink refused R shrunk S".
Prints "step N ok" after each step and "stats {json}" at the end; on an error prints it
to stderr and exits 3.
"""

import argparse
import hashlib
import json
import os
import signal
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from native import init_from_env, load_core  # noqa: E402

COUNT = 50_003  # odd: partitions of uneven size over both servers
BIG = 2_500_003  # 10 MB: 3 chunks of hierarchical aggregation (4 MB each at most)


def inputs(rank, step, count_f32=COUNT):
    rng = np.random.default_rng(1000 * step + rank)
    return {
        "f32": rng.standard_normal(count_f32).astype(np.float32) * np.float32(10 ** (rank % 3)),
        "f64": rng.standard_normal(777),
        "i32": rng.integers(-2**31, 2**31 - 1, 999, dtype=np.int32),  # sums wrap around
        "f16": rng.standard_normal(64).astype(np.float16),
        "big": rng.standard_normal(BIG).astype(np.float32),
        "empty": np.zeros(0, np.float32),
    }


def expected(size, step):
    per_rank = [inputs(r, step) for r in range(size)]
    out = {}
    for name in ("f32", "f64", "big", "empty"):
        acc = per_rank[0][name].copy()
        for r in range(1, size):
            acc = acc + per_rank[r][name]  # same dtype: one rounding per addition
        out[name] = acc
    acc = per_rank[0]["i32"].astype(np.int64)
    for r in range(1, size):
        acc = acc + per_rank[r]["i32"]
    out["i32"] = ((acc + 2**31) % 2**32 - 2**31).astype(np.int32)
    out["f16"] = sum(p["f16"].astype(np.float32) for p in per_rank)
    return out


def shrink_own_segments():
    refused = shrunk = 0
    for entry in os.listdir("/proc/self/map_files"):
        path = os.path.join("/proc/self/map_files", entry)
        if not os.readlink(path).startswith("/memfd:tfps"):
            continue
        fd = os.open(path, os.O_RDWR)
        try:
            os.ftruncate(fd, 0)
            shrunk += 1
        except PermissionError:  # EPERM: sealed against shrinking
            refused += 1
        finally:
            os.close(fd)
    print(f"shrink refused {refused} shrunk {shrunk}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("steps", type=int)
    parser.add_argument("--exact", action="store_true")
    parser.add_argument("--digest")
    parser.add_argument("--die-at", type=int, default=-1)
    parser.add_argument("--count-of-rank", default="")
    parser.add_argument("--only")
    parser.add_argument("--shrink-at", type=int, default=-1)
    args = parser.parse_args()
    core = load_core()
    digest = hashlib.sha256()
    try:
        rank, size = init_from_env(core)
        print(f"local rank {core.local_rank()} of {core.local_size()}", flush=True)
        count_f32 = COUNT
        if args.count_of_rank:
            who, n = map(int, args.count_of_rank.split(":"))
            count_f32 = n if who == rank else COUNT
        for step in range(args.steps):
            if step == args.die_at and rank == size - 1:
                os.kill(os.getpid(), signal.SIGKILL)
            if step == args.shrink_at and core.local_rank() != 0:
                shrink_own_segments()
            x = inputs(rank, step, count_f32)
            if args.only:
                core.push_pull(args.only, x[args.only])
                continue
            names = [f"{name}" for name in x]
            got = dict(zip(names, core.push_pull_group(names, list(x.values()))))
            root = core.push_pull("bcast", np.full(5, rank, np.int64), root_rank=0)
            want = expected(size, step)
            for name in ("f32", "f64", "i32", "big", "empty"):
                if args.exact or name == "i32":
                    ok = got[name].tobytes() == want[name].tobytes()
                else:
                    ok = np.allclose(got[name], want[name], rtol=1e-5, atol=1e-4)
                if not ok:
                    print(f"step {step} {name}: got {got[name][:3]}, expected {want[name][:3]}",
                          file=sys.stderr)
                    sys.exit(4)
                digest.update(got[name].tobytes())
            if not np.allclose(got["f16"].astype(np.float32), want["f16"], rtol=1e-2, atol=1e-2):
                print(f"step {step} f16: got {got['f16'][:3]}", file=sys.stderr)
                sys.exit(4)
            if not np.all(root == 0):
                print(f"step {step} broadcast: got {root}", file=sys.stderr)
                sys.exit(4)
            print(f"step {step} ok", flush=True)
        print("stats " + json.dumps(core.stats()), flush=True)
        if args.digest and rank == 0:
            with open(args.digest, "w") as f:
                f.write(digest.hexdigest())
        core.shutdown()
    except RuntimeError as e:
        print(f"push_pull failed: {e}", file=sys.stderr, flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main()

"""One worker of the fusion benchmark (started by fusion_bench.py inside a host's
namespace): push_pulls groups of small tensors started together, like the gradients of a
model's biases and norms, and times each group. No TensorFlow.

    fusion_worker.py --groups 64x4096,256x1024 [--target-seconds 2]

Prints one JSON object per group on stdout.
"""

import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from native import init_from_env, load_core  # noqa: E402


def bench_group(core, count, nbytes, rank, size, target_s):
    names = ["fusion/%dx%d/%d" % (count, nbytes, i) for i in range(count)]
    arrays = [np.full(nbytes // 4, rank + 1 + i, np.float32) for i in range(count)]
    got = core.push_pull_group(names, arrays)
    for i, y in enumerate(got):
        expected = sum(r + 1 + i for r in range(size))
        if not np.all(y == expected):
            raise SystemExit("group %dx%d: tensor %d has a wrong sum" % (count, nbytes, i))
    start = time.perf_counter()
    core.push_pull_group(names, arrays)
    last = time.perf_counter() - start
    iters = max(5, math.ceil(target_s / max(last, 1e-6)))
    iters = int(core.push_pull("fusion/iters", np.array([iters], np.int64), root_rank=0)[0])
    stats0, cpu0 = core.stats(), time.process_time()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        core.push_pull_group(names, arrays)
        times.append(time.perf_counter() - start)
    cpu, stats1 = time.process_time() - cpu0, core.stats()
    per_iter = {k: (stats1[k] - stats0[k]) / iters
                for k in ("messages_sent", "parts_sent", "batches_received")}
    return dict(count=count, bytes=nbytes, rank=rank, iters=iters,
                median_s=float(np.median(times)), min_s=min(times),
                worker_cpu_s_per_iter=cpu / iters, **per_iter)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", required=True, help="COUNTxBYTES,...")
    parser.add_argument("--target-seconds", type=float, default=2.0)
    args = parser.parse_args()
    core = load_core()
    rank, size = init_from_env(core)
    for group in args.groups.split(","):
        count, nbytes = (int(v) for v in group.split("x"))
        row = bench_group(core, count, nbytes, rank, size, args.target_seconds)
        print(json.dumps(row), flush=True)
        print("group %s: %.2f ms" % (group, 1e3 * row["median_s"]), file=sys.stderr, flush=True)
    core.shutdown()


if __name__ == "__main__":
    main()

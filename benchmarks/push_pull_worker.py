"""One worker of the push_pull micro-benchmark (started by push_pull_bench.py inside a
host's namespace). No TensorFlow: the pybind11 core module drives the engine.

    push_pull_worker.py --sizes 1024,4096,... [--target-seconds 1.5]

The cluster comes from TFPS_SCHEDULER, TFPS_RANK, TFPS_SIZE, TFPS_NUM_SERVERS;
NETNS_SERVER_PID (optional) is the ps_server on this host, whose CPU time is sampled from
/proc around each timed loop. Prints one JSON object per size on stdout.
"""

import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # no idle BLAS threads competing for CPU
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from native import init_from_env, load_core  # noqa: E402

_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid):
    """utime + stime of another process, from /proc (None if it is gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS


def bench_size(core, nbytes, rank, size, target_s, max_iters, server_pid):
    count = nbytes // 4
    name = "bench/%d" % nbytes
    x = np.full(count, rank + 1, dtype=np.float32)
    expected = size * (size + 1) / 2
    warmup = 1 if nbytes >= (64 << 20) else 3
    for i in range(warmup):
        start = time.perf_counter()
        y = core.push_pull(name, x)
        last = time.perf_counter() - start
        if i == 0 and not np.all(y == expected):
            bad = np.flatnonzero(y != expected)
            raise SystemExit("size %d: wrong sum at %d element(s), first at %d: %r != %r"
                             % (nbytes, bad.size, bad[0], y[bad[0]], expected))
    del y
    # Every worker must run the same number of iterations: rank 0 decides.
    iters = min(max_iters, max(3, math.ceil(target_s / max(last, 1e-6))))
    iters = int(core.push_pull(name + "/iters", np.array([iters], np.int64), root_rank=0)[0])

    times = []
    stats0 = core.stats()
    server0 = process_cpu_s(server_pid) if server_pid else None
    cpu0 = time.process_time()  # every thread of this process, the engine's too
    begin = time.perf_counter()
    for _ in range(iters):
        start = time.perf_counter()
        core.push_pull(name, x)
        times.append(time.perf_counter() - start)
    total = time.perf_counter() - begin
    cpu = time.process_time() - cpu0
    server1 = process_cpu_s(server_pid) if server_pid else None
    stats1 = core.stats()
    return {
        "bytes": nbytes, "rank": rank, "iters": iters, "warmup": warmup,
        "total_s": total, "mean_s": total / iters, "median_s": float(np.median(times)),
        "min_s": min(times), "max_s": max(times),
        "worker_cpu_s_per_iter": cpu / iters,
        "server_cpu_s_per_iter": (None if server0 is None or server1 is None
                                  else (server1 - server0) / iters),
        "sent_per_iter": (stats1["bytes_sent"] - stats0["bytes_sent"]) / iters,
        "received_per_iter": (stats1["bytes_received"] - stats0["bytes_received"]) / iters,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", required=True, help="comma-separated byte counts")
    parser.add_argument("--target-seconds", type=float, default=1.5)
    parser.add_argument("--max-iters", type=int, default=1000)
    args = parser.parse_args()
    core = load_core()
    server_pid = int(os.environ.get("NETNS_SERVER_PID", "0"))
    rank, size = init_from_env(core)
    for nbytes in (int(s) for s in args.sizes.split(",")):
        row = bench_size(core, nbytes, rank, size, args.target_seconds, args.max_iters,
                         server_pid)
        print(json.dumps(row), flush=True)
        if rank == 0:
            print("rank 0: %d bytes x %d in %.3f s" % (nbytes, row["iters"], row["total_s"]),
                  file=sys.stderr, flush=True)
    core.shutdown()


if __name__ == "__main__":
    main()

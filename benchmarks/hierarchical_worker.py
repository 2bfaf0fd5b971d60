"""One worker of hierarchical_bench.py (inside a host's namespace; no TensorFlow).

    hierarchical_worker.py --sizes 4194304,16777216 [--target-seconds 2]

Prints one JSON object per size: wall seconds and this process's CPU seconds over the
timed loop, and (local rank 0 only) the CPU seconds of the ps_server on its host
(NETNS_SERVER_PID) over the same loop.
"""

import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from push_pull_worker import process_cpu_s  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from native import init_from_env, load_core  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", required=True)
    parser.add_argument("--target-seconds", type=float, default=2.0)
    args = parser.parse_args()
    core = load_core()
    rank, size = init_from_env(core)
    server_pid = int(os.environ.get("NETNS_SERVER_PID", "0")) if core.local_rank() == 0 else 0
    for nbytes in map(int, args.sizes.split(",")):
        name = "bench/%d" % nbytes
        x = np.full(nbytes // 4, rank + 1, np.float32)
        start = time.perf_counter()
        for _ in range(2):
            y = core.push_pull(name, x)
        last = (time.perf_counter() - start) / 2
        if not np.all(y == size * (size + 1) / 2):
            raise SystemExit("wrong sum for %d bytes" % nbytes)
        iters = max(3, math.ceil(args.target_seconds / max(last, 1e-6)))
        iters = int(core.push_pull(name + "/iters", np.array([iters], np.int64), root_rank=0)[0])
        server0 = process_cpu_s(server_pid) if server_pid else None
        cpu0 = time.process_time()
        begin = time.perf_counter()
        for _ in range(iters):
            core.push_pull(name, x)
        seconds = time.perf_counter() - begin
        cpu = time.process_time() - cpu0
        server1 = process_cpu_s(server_pid) if server_pid else None
        print(json.dumps({"rank": rank, "local_rank": core.local_rank(), "bytes": nbytes,
                          "iters": iters, "seconds": seconds, "cpu_s": cpu,
                          "server_cpu_s": (server1 - server0) if server_pid else None}),
              flush=True)
    core.shutdown()


if __name__ == "__main__":
    main()

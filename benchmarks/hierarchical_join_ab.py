"""Two builds of tf_ps_ops on one host under hierarchical aggregation, interleaved (A B A B
...): what the local leader's per-step join checks cost (docs/hierarchical.md, "join()").
3 workers and 1 ps_server on this host (TFPS_HIERARCHICAL=1), push_pull of float32
tensors with each tree's benchmarks/hierarchical_worker.py (no TensorFlow), no join.

    python3 benchmarks/hierarchical_join_ab.py A_TREE B_TREE [--sizes 4096,4194304]
        [--repeats 3] [--target-seconds 1.5] [--out hierarchical_join_ab]

Each tree must be built (make build). Reports per size the median over repeats of ms per
push_pull (the slowest rank) and CPU seconds per push_pull of the 3 workers and the
server, and B/A ratios. Writes results/<out>.{md,json}.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from tfps_harness.launch_cluster import LoggedCluster  # noqa: E402
from hierarchical_bench import worker_rows  # noqa: E402 (this folder: the script's)

WORKERS = 3


class Job(LoggedCluster):
    def worker_env(self, rank):
        env = super().worker_env(rank)
        env["NETNS_SERVER_PID"] = str(self.process("server", 0).pid)  # rank 0 reads it
        return env


def run(tree, workdir, sizes, target_s):
    job = Job(str(tree / "tf_ps_ops" / "bin" / "ps_server"), workdir, WORKERS, 1, timeout=600,
              env={"TFPS_HIERARCHICAL": "1"}, cwd=tree, defaults={"TFPS_TIMEOUT": "120", "TFPS_BIND": "127.0.0.1"})
    rows = worker_rows(job, [sys.executable, tree / "benchmarks" / "hierarchical_worker.py",
                             "--sizes", ",".join(map(str, sizes)), "--target-seconds", str(target_s)])
    out = {}
    for nbytes in sizes:
        mine = [r for r in rows if r["bytes"] == nbytes]
        iters = mine[0]["iters"]
        server = next(r["server_cpu_s"] for r in mine if r["local_rank"] == 0)
        out[nbytes] = {"ms": 1000 * max(r["seconds"] for r in mine) / iters,
                       "cpu_s": (sum(r["cpu_s"] for r in mine) + server) / iters}
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--sizes", default="4096,4194304")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--target-seconds", type=float, default=1.5)
    parser.add_argument("--out", default="hierarchical_join_ab")
    args = parser.parse_args()
    trees = {"A": Path(args.a).resolve(), "B": Path(args.b).resolve()}
    sizes = [int(s) for s in args.sizes.split(",")]
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    load_before = os.getloadavg()
    raw = []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for side, tree in trees.items():
                result = run(tree, Path(tmp) / f"{side}-{repeat}", sizes, args.target_seconds)
                for nbytes, r in result.items():
                    raw.append({"side": side, "repeat": repeat, "bytes": nbytes, **r})
                    print(json.dumps(raw[-1]), flush=True)
    load_after = os.getloadavg()
    lines = ["# Hierarchical aggregation, two builds interleaved (join() checks' cost)\n",
             f"Command: `python3 benchmarks/hierarchical_join_ab.py {' '.join(sys.argv[1:])}` "
             f"({started} UTC; A = {trees['A']}, B = {trees['B']}). One host, 3 workers "
             f"(pybind11 core) and 1 ps_server, TFPS_HIERARCHICAL=1, float32, no join; A and "
             f"B interleaved in every repeat, medians over {args.repeats} repeats. CPU: "
             f"seconds per push_pull of the 3 workers and the server. Load average before "
             f"{load_before[0]:.2f}, after {load_after[0]:.2f} (a shared machine).\n",
             "| size | A ms | B ms | B/A time | A CPU-s | B CPU-s | B/A CPU |",
             "|---|---|---|---|---|---|---|"]
    for nbytes in sizes:
        med = {side: {k: statistics.median(r[k] for r in raw
                                           if r["side"] == side and r["bytes"] == nbytes)
                      for k in ("ms", "cpu_s")} for side in trees}
        a, b = med["A"], med["B"]
        lines.append(f"| {nbytes} | {a['ms']:.3f} | {b['ms']:.3f} | {b['ms'] / a['ms']:.2f} | "
                     f"{a['cpu_s']:.5f} | {b['cpu_s']:.5f} | {b['cpu_s'] / a['cpu_s']:.2f} |")
    results = HERE / "results"
    (results / f"{args.out}.json").write_text(json.dumps(raw, indent=1) + "\n")
    (results / f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

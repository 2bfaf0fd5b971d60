"""Hierarchical aggregation against the flat path, in one run: 2 emulated hosts (netns,
tbf-limited), each with one ps_server and 2 workers (local_size 2); push_pull of float32
tensors, TFPS_HIERARCHICAL=0 and =1 interleaved per repeat.

    python3 benchmarks/hierarchical_bench.py [--rates 1gbit,10gbit] [--sizes ...]
        [--repeats 3] [--out hierarchical]

Reports per rate and size the median over repeats of: ms per push_pull, algbw (tensor
bytes / time, Gbit/s) and CPU seconds per push_pull per host (its 2 workers + its
server). Writes results/<out>.{md,json}. Needs root.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from netns import Hosts  # noqa: E402
from ps_cluster import PS_SERVER, netns_host  # noqa: E402
from tfps_harness.launch_cluster import LoggedCluster  # noqa: E402

WORKERS_PER_HOST = 2


class Job(LoggedCluster):
    def __init__(self, hosts, workdir, env):
        super().__init__(PS_SERVER, workdir, hosts.n * WORKERS_PER_HOST, hosts.n, timeout=600,
                         env=env, cwd=HERE.parent, defaults={"TFPS_TIMEOUT": "120", "TFPS_INSECURE": "1"})
        self._on = [netns_host(hosts, i) for i in range(hosts.n)]

    def host(self, role, index):
        if role == "worker":
            return self._on[index // WORKERS_PER_HOST]
        return self._on[index]

    def worker_env(self, rank):
        env = super().worker_env(rank)
        env["NETNS_SERVER_PID"] = str(self.process("server", rank // WORKERS_PER_HOST).pid)
        return env


def worker_rows(job, argv):
    """Runs `argv` (hierarchical_worker.py) on every worker of `job` to the end and returns
    the JSON rows the workers printed; exits naming any role that failed."""
    try:
        job.start(argv)
        job.wait()
        failed = job.failures()
        if failed:
            raise SystemExit("\n".join(r.describe() for r in failed))
    finally:
        job.close()
    return [json.loads(line) for r in job.worker_results() for line in r.stdout.splitlines()
            if line.startswith("{")]


def run(hosts, workdir, hierarchical, sizes, target_s):
    rows = worker_rows(Job(hosts, workdir, {"TFPS_HIERARCHICAL": str(hierarchical)}),
                       [sys.executable, HERE / "hierarchical_worker.py", "--sizes",
                        ",".join(map(str, sizes)), "--target-seconds", str(target_s)])
    out = {}
    for nbytes in sizes:
        mine = [r for r in rows if r["bytes"] == nbytes]
        iters = mine[0]["iters"]
        seconds = max(r["seconds"] for r in mine) / iters
        per_host = []
        for h in range(hosts.n):
            on = [r for r in mine if r["rank"] // WORKERS_PER_HOST == h]
            server = next(r["server_cpu_s"] for r in on if r["local_rank"] == 0)
            per_host.append((sum(r["cpu_s"] for r in on) + server) / iters)
        out[nbytes] = {"ms": 1000 * seconds, "algbw_gbit": nbytes * 8 / seconds / 1e9,
                       "cpu_s_per_host": statistics.mean(per_host)}
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", default="1gbit,10gbit")
    parser.add_argument("--sizes", default="4194304,16777216,67108864")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--target-seconds", type=float, default=2.0)
    parser.add_argument("--out", default="hierarchical")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=HERE).stdout.strip()
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    load_before = os.getloadavg()
    raw = []
    with tempfile.TemporaryDirectory() as tmp:
        for rate in args.rates.split(","):
            with Hosts(2, rate=rate) as hosts:
                for repeat in range(args.repeats):
                    for hierarchical in (0, 1):
                        result = run(hosts, Path(tmp) / f"{rate}-{repeat}-{hierarchical}",
                                     hierarchical, sizes, args.target_seconds)
                        for nbytes, r in result.items():
                            raw.append({"rate": rate, "repeat": repeat,
                                        "hierarchical": hierarchical, "bytes": nbytes, **r})
                            print(json.dumps(raw[-1]), flush=True)
    load_after = os.getloadavg()
    results = HERE / "results"
    (results / f"{args.out}.json").write_text(json.dumps(raw, indent=1) + "\n")
    lines = [f"# Hierarchical aggregation against the flat path\n",
             f"Command: `python3 benchmarks/hierarchical_bench.py {' '.join(sys.argv[1:])}` "
             f"({started} UTC, {args.repeats} repeat(s), {commit}). 2 hosts, each one ps_server "
             f"and 2 workers (pybind11 core, no TensorFlow), float32; flat and hierarchical "
             f"interleaved in every repeat; medians over repeats. CPU: seconds per push_pull "
             f"per host (its 2 workers + its server). Load average before {load_before[0]:.2f}, "
             f"after {load_after[0]:.2f}.\n",
             "| link | size | flat ms | hier. ms | speed-up | flat algbw | hier. algbw | "
             "flat CPU-s/host | hier. CPU-s/host | CPU ratio |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for rate in args.rates.split(","):
        for nbytes in sizes:
            med = {}
            for h in (0, 1):
                rows = [r for r in raw if r["rate"] == rate and r["bytes"] == nbytes
                        and r["hierarchical"] == h]
                med[h] = {k: statistics.median(r[k] for r in rows)
                          for k in ("ms", "algbw_gbit", "cpu_s_per_host")}
            lines.append(
                f"| {rate} | {nbytes >> 20} MB | {med[0]['ms']:.1f} | {med[1]['ms']:.1f} | "
                f"{med[0]['ms'] / med[1]['ms']:.2f}x | {med[0]['algbw_gbit']:.2f} | "
                f"{med[1]['algbw_gbit']:.2f} | {med[0]['cpu_s_per_host']:.4f} | "
                f"{med[1]['cpu_s_per_host']:.4f} | "
                f"{med[1]['cpu_s_per_host'] / med[0]['cpu_s_per_host']:.2f} |")
    (results / f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""What the job key (ZeroMQ CURVE) costs between two emulated hosts at 1 and 10 Gbit/s.

    sudo python3 benchmarks/auth_netns.py [--repeats 3] [--out benchmarks/results/auth_netns]

Two netns hosts (benchmarks/netns.py, tbf-limited links), each with a ps_server and a
worker (benchmarks/ps_cluster.py); the scheduler on host 0. Each worker push_pulls a 16
MiB float32 tensor 10 times after one warm-up (partitions spread over both servers), plain
(TFPS_INSECURE=1) and keyed (TFPS_AUTH_KEY_FILE), alternating, `--repeats` times per rate.
Reported: each worker's push+pull rate (2 x 16 MiB per call / time) and CPU seconds per
call of the worker and of its host's server. The machine is shared: compare the ratios of
one sweep, not absolute numbers across runs.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO)]
from netns import Hosts  # noqa: E402
from ps_cluster import NetnsCluster  # noqa: E402

WORKER = r'''
import os, resource, sys, time, numpy as np
sys.path.insert(0, sys.argv[1])
from native import init_from_env, load_core
core = load_core(); init_from_env(core)
x = np.ones(4 << 20, np.float32)
core.push_pull("b", x)
n = 10
t, c = time.perf_counter(), time.process_time()
for _ in range(n): core.push_pull("b", x)
dt, cpu = time.perf_counter() - t, time.process_time() - c
print(f"RESULT {n * x.nbytes * 2 * 8 / dt / 1e9:.3f} {dt / n * 1e3:.1f} {cpu / n:.4f}", flush=True)
core.shutdown()
'''


def run_once(hosts, workdir, keyed, key_file):
    env = {"TFPS_TIMEOUT": "120", "OPENBLAS_NUM_THREADS": "1"}
    if keyed:
        env["TFPS_AUTH_KEY_FILE"] = str(key_file)
    cluster = NetnsCluster(hosts, workdir, timeout=300, env=env)
    try:
        cluster.start(lambda rank: [sys.executable, "-c", WORKER, str(REPO / "tests")])
        cluster.wait()
        failed = cluster.failures()
        if failed:
            raise RuntimeError("\n".join(r.describe() for r in failed))
        rows = []
        for rank in range(hosts.n):
            gbit, ms, cpu = cluster.result("worker", rank).stdout.split("RESULT ")[1].split()
            rows.append(dict(gbit=float(gbit), ms=float(ms), worker_cpu_s=float(cpu),
                             server_cpu_s=cluster.result("server", rank).cpu_s))
        return rows
    finally:
        cluster.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rates", default="1gbit,10gbit")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "auth_netns"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        key = Path(tmp) / "job.key"
        subprocess.run([str(REPO / "tf_ps_ops" / "bin" / "ps_server"), "--gen-key", str(key)],
                       check=True)
        for rate in args.rates.split(","):
            with Hosts(2, rate=rate) as hosts:
                for repeat in range(args.repeats):
                    for keyed in (False, True):
                        name = "keyed" if keyed else "plain"
                        rows = run_once(hosts, Path(tmp) / f"{rate}-{name}-{repeat}", keyed, key)
                        results.setdefault(rate, {}).setdefault(name, []).append(rows)
                        print(rate, name, repeat, rows, flush=True)
    (out / "auth_netns.json").write_text(json.dumps(results, indent=1))
    lines = ["| link | plain Gbit/s (median per worker) | keyed Gbit/s | keyed/plain | ms per "
             "16 MiB push_pull plain / keyed | worker CPU s per call plain / keyed |",
             "|---|---|---|---|---|---|"]
    for rate, by in results.items():
        med = {k: statistics.median(r["gbit"] for rows in v for r in rows) for k, v in by.items()}
        ms = {k: statistics.median(r["ms"] for rows in v for r in rows) for k, v in by.items()}
        cpu = {k: statistics.median(r["worker_cpu_s"] for rows in v for r in rows)
               for k, v in by.items()}
        lines.append(f"| {rate} | {med['plain']:.2f} | {med['keyed']:.2f} | "
                     f"{med['keyed'] / med['plain']:.2f} | {ms['plain']:.0f} / {ms['keyed']:.0f} | "
                     f"{cpu['plain']:.3f} / {cpu['keyed']:.3f} |")
    table = "\n".join(lines)
    (out / "auth_netns.md").write_text(
        "# Encryption cost between two netns hosts\n\n`python3 benchmarks/auth_netns.py "
        f"--repeats {args.repeats}` ({args.rates}; 2 hosts, a worker and a server on each, "
        "16 MiB push_pull x10 per run)\n\n" + table + "\n")
    print(table)


if __name__ == "__main__":
    main()

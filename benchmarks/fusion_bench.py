"""Fusion benchmark: groups of small tensors push_pulled together, with batches
(TFPS_FUSION_BYTES) off and on, on 2 emulated hosts (a worker and a ps_server on each).

    python3 benchmarks/fusion_bench.py            # 1 Gbit/s and unlimited links (~2 min)
    python3 benchmarks/fusion_bench.py --rates 1gbit --fusion 0,65536,262144

Writes benchmarks/results/fusion.json and fusion.md (median time per group, worker CPU per
group, messages per group).
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from netns import Hosts, available  # noqa: E402
from ps_cluster import NetnsCluster  # noqa: E402

GROUPS = "16x4096,64x4096,256x1024,64x65536"


def run(rate, fusion, groups, target, workdir):
    env = {"TFPS_FUSION_BYTES": str(fusion)}
    with Hosts(2, rate=None if rate == "none" else rate) as hosts:
        cluster = NetnsCluster(hosts, workdir, timeout=300, env=env)
        try:
            cluster.start(lambda rank: [sys.executable, HERE / "fusion_worker.py",
                                        "--groups", groups, "--target-seconds", str(target)])
            cluster.wait()
            cluster.check()
            rows = [json.loads(line) for r in cluster.results() if r.role == "worker"
                    for line in r.stdout.splitlines() if line.startswith("{")]
        finally:
            cluster.close()
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1gbit,none")
    parser.add_argument("--fusion", default="0,262144", help="TFPS_FUSION_BYTES values")
    parser.add_argument("--groups", default=GROUPS, help="COUNTxBYTES,...")
    parser.add_argument("--target-seconds", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=str(HERE / "results" / "fusion"))
    args = parser.parse_args()
    ok, why = available()
    if not ok:
        sys.exit("fusion_bench needs network namespaces: " + why)
    t0 = time.monotonic()
    results = []
    workdir = Path(tempfile.mkdtemp(prefix="fusion_bench-"))
    for repeat in range(args.repeats):  # interleaved, so drift hits every setting alike
        for rate in args.rates.split(","):
            for fusion in (int(v) for v in args.fusion.split(",")):
                print("repeat %d, %s, TFPS_FUSION_BYTES=%d" % (repeat, rate, fusion), flush=True)
                for row in run(rate, fusion, args.groups, args.target_seconds,
                               workdir / ("%s-%d-%d" % (rate, fusion, repeat))):
                    results.append(dict(row, rate=rate, fusion=fusion, repeat=repeat))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = dict(command="python3 benchmarks/fusion_bench.py " + " ".join(sys.argv[1:]),
                started=time.strftime("%Y-%m-%d %H:%M"), duration_s=round(time.monotonic() - t0))
    out.with_suffix(".json").write_text(json.dumps(dict(meta=meta, rows=results), indent=1))
    lines = ["# Fusion: groups of small tensors, 2 hosts, batches off and on", "",
             "`%s` (%s, %d s). Per group: median over repeats of each run's median step "
             "(the slower worker), worker CPU per group (rank 0) and ZeroMQ messages rank 0 "
             "sent per group." % (meta["command"], meta["started"], meta["duration_s"]), "",
             "| link | group | TFPS_FUSION_BYTES | ms per group | worker CPU ms | messages sent |",
             "|---|---|---|---|---|---|"]
    keys = sorted({(r["rate"], r["count"], r["bytes"], r["fusion"]) for r in results},
                  key=lambda k: (k[0], k[2] * k[1], k[1], k[3]))
    for rate, count, nbytes, fusion in keys:
        rows = [r for r in results if (r["rate"], r["count"], r["bytes"], r["fusion"]) ==
                (rate, count, nbytes, fusion)]
        per_repeat = {}
        for r in rows:
            per_repeat[r["repeat"]] = max(per_repeat.get(r["repeat"], 0), r["median_s"])
        step = sorted(per_repeat.values())[len(per_repeat) // 2]
        rank0 = [r for r in rows if r["rank"] == 0]
        cpu = sorted(r["worker_cpu_s_per_iter"] for r in rank0)[len(rank0) // 2]
        msgs = rank0[0]["messages_sent"]
        lines.append("| %s | %d x %d B | %d | %.2f | %.2f | %.0f |" % (
            rate, count, nbytes, fusion, 1e3 * step, 1e3 * cpu, msgs))
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

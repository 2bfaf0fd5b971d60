"""TFPS_SHM_SERVER=0 against =1 on the dense MLP (784-4096x3-10, 147 MB of gradient per
step) at 10 Gbit/s, 2 emulated hosts with one worker and one ps_server each (the issue's
CPU target layout), interleaved: train_bench.py once per setting per repeat (modes
single and sum; single gives the compute's own CPU per step), then the medians.

    python3 benchmarks/shm_train_ab.py [--repeats 3] [--rate 10gbit]

CPU per host = worker + server CPU-s per step (train_bench's per-process means over the
timed window); "transport" subtracts the single-process run's CPU per step (the
forward/backward and optimizer work every worker does anyway). The machine is shared:
the runs do not wait for it to be idle (--idle-patience 0), and the other processes'
load is reported per run; compare the ratios. Writes results/shm_train_ab.{md,json}.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rate", default="10gbit")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="for both settings")
    parser.add_argument("--variant", action="append", default=[],
                        metavar="LABEL[@TREE]:NAME=V,...",
                        help="compare these settings instead of TFPS_SHM_SERVER=0 and =1 "
                             "(interleaved, in one run), e.g. --variant "
                             "before:TFPS_SHM_SERVER=1 --variant after:TFPS_SHM_SERVER=1,X=1; "
                             "@TREE runs another built checkout's train_bench.py (a build "
                             "before a change, against this one)")
    parser.add_argument("--out", default="shm_train_ab",
                        help="results/OUT.{md,json}")
    args = parser.parse_args()
    variants, trees = {}, {}
    for spec in args.variant:
        label, _, envs = spec.partition(":")
        label, _, tree = label.partition("@")
        if not label or "=" not in envs:
            parser.error("--variant takes LABEL[@TREE]:NAME=VALUE[,NAME=VALUE]")
        variants[label] = envs.split(",")
        if tree:
            trees[label] = Path(tree).resolve()
    if not variants:
        variants = {0: ["TFPS_SHM_SERVER=0"], 1: ["TFPS_SHM_SERVER=1"]}
    labels = list(variants)
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    runs = []
    with tempfile.TemporaryDirectory(prefix="shm_train_ab.") as tmp:
        for repeat in range(args.repeats):
            for value in labels:
                tag = f"v{labels.index(value)}_{repeat}"
                extra = [a for e in args.env + variants[value] for a in ("--env", e)]
                bench = trees.get(value, HERE.parent) / "benchmarks" / "train_bench.py"
                subprocess.run([sys.executable, bench, "--models", "mlp",
                                "--rates", args.rate, "--modes", "single,sum", "--repeats", "1",
                                "--retries", "0", "--idle-patience", "0", "--other-limit", "100",
                                "--steps", str(args.steps),
                                *extra, "--tag", tag, "--results-dir", tmp],
                               check=True, stdout=subprocess.DEVNULL)
                data = json.loads((Path(tmp) / f"train_{tag}.json").read_text())
                rows = {r["mode"]: r for r in data["rows"]}
                single, tfps = rows["single"], rows["sum"]
                if tfps.get("status") != "ok":
                    raise SystemExit(f"run {tag} failed: {tfps.get('status')}")
                host = tfps["worker_cpu_per_step"] + tfps["server_cpu_per_step"]
                run = dict(value=value, repeat=repeat, step_s=tfps["step_s"], host_cpu=host,
                           worker_cpu=tfps["worker_cpu_per_step"],
                           server_cpu=tfps["server_cpu_per_step"],
                           single_cpu=single["cpu_per_step"], single_step_s=single["step_s"],
                           transport_cpu=host - single["cpu_per_step"],
                           other_cores=tfps["other_cores"], tx_mb=tfps["tx_mb_per_step"])
                print(json.dumps(run), flush=True)
                runs.append(run)
    med = {}
    for value in labels:
        mine = [r for r in runs if r["value"] == value]
        med[value] = {k: statistics.median(r[k] for r in mine)
                      for k in ("step_s", "host_cpu", "worker_cpu", "server_cpu", "single_cpu",
                                "transport_cpu", "other_cores")}
    lines = ["# Dense MLP at 10 Gbit/s: loopback TCP against shared memory to the local server\n",
             f"Command: `python3 benchmarks/shm_train_ab.py {' '.join(sys.argv[1:])}` "
             f"({started} UTC; each run is `train_bench.py --models mlp --rates {args.rate} "
             f"--modes single,sum --steps {args.steps} --env <each setting>`, the settings "
             "interleaved). 2 hosts, one worker + one ps_server each, batch 32 per worker, 1 TF "
             "thread per process. Medians over repeats; CPU-s per step per host.\n",
             f"| {'variant' if args.variant else 'TFPS_SHM_SERVER'} | step s | worker CPU | "
             "server CPU | host CPU (w+s) | single-process CPU | transport CPU (host - single) "
             "| other cores busy |",
             "|---|---|---|---|---|---|---|---|"]
    for value in labels:
        m = med[value]
        lines.append(f"| {value} | {m['step_s']:.3f} | {m['worker_cpu']:.3f} | "
                     f"{m['server_cpu']:.3f} | {m['host_cpu']:.3f} | {m['single_cpu']:.3f} | "
                     f"{m['transport_cpu']:.3f} | {m['other_cores']:.2f} |")
    lines.append("")
    a, b = labels[0], labels[-1]
    lines.append(f"Ratios ({b} / {a}): step time {med[b]['step_s'] / med[a]['step_s']:.2f}, "
                 f"host CPU {med[b]['host_cpu'] / med[a]['host_cpu']:.2f}, transport CPU "
                 f"{med[b]['transport_cpu'] / med[a]['transport_cpu']:.2f}.\n")
    if args.variant:
        lines.append("Settings: " + "; ".join(
            f"{k}: {' '.join(v)}" + (f" (tree {trees[k]})" if k in trees else "")
            for k, v in variants.items()) + "\n")
    lines.append("Per run: " + "; ".join(
        f"{r['value']}/{r['repeat']}: {r['step_s']:.3f} s, host {r['host_cpu']:.3f}, "
        f"transport {r['transport_cpu']:.3f}, others {r['other_cores']:.2f} cores"
        for r in runs))
    out = HERE / "results" / args.out
    record = {"command": sys.argv, "started": started, "runs": runs, "medians": med,
              "variants": variants, "trees": {k: str(v) for k, v in trees.items()}}
    out.with_suffix(".json").write_text(json.dumps(record, indent=1, default=str))
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

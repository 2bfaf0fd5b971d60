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
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    runs = []
    with tempfile.TemporaryDirectory(prefix="shm_train_ab.") as tmp:
        for repeat in range(args.repeats):
            for value in (0, 1):
                tag = f"shm{value}_{repeat}"
                extra = [a for e in args.env for a in ("--env", e)]
                subprocess.run([sys.executable, HERE / "train_bench.py", "--models", "mlp",
                                "--rates", args.rate, "--modes", "single,sum", "--repeats", "1",
                                "--retries", "0", "--idle-patience", "0", "--other-limit", "100",
                                "--steps", str(args.steps), "--env", f"TFPS_SHM_SERVER={value}",
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
    for value in (0, 1):
        mine = [r for r in runs if r["value"] == value]
        med[value] = {k: statistics.median(r[k] for r in mine)
                      for k in ("step_s", "host_cpu", "worker_cpu", "server_cpu", "single_cpu",
                                "transport_cpu", "other_cores")}
    lines = ["# Dense MLP at 10 Gbit/s: loopback TCP against shared memory to the local server\n",
             f"Command: `python3 benchmarks/shm_train_ab.py {' '.join(sys.argv[1:])}` "
             f"({started} UTC; each run is `train_bench.py --models mlp --rates {args.rate} "
             f"--modes single,sum --steps {args.steps} --env TFPS_SHM_SERVER=<v>`, =0 and =1 "
             "interleaved). 2 hosts, one worker + one ps_server each, batch 32 per worker, 1 TF "
             "thread per process. Medians over repeats; CPU-s per step per host.\n",
             "| TFPS_SHM_SERVER | step s | worker CPU | server CPU | host CPU (w+s) | "
             "single-process CPU | transport CPU (host - single) | other cores busy |",
             "|---|---|---|---|---|---|---|---|"]
    for value in (0, 1):
        m = med[value]
        lines.append(f"| {value} | {m['step_s']:.3f} | {m['worker_cpu']:.3f} | "
                     f"{m['server_cpu']:.3f} | {m['host_cpu']:.3f} | {m['single_cpu']:.3f} | "
                     f"{m['transport_cpu']:.3f} | {m['other_cores']:.2f} |")
    lines.append("")
    lines.append(f"Ratios (shm / TCP): step time {med[1]['step_s'] / med[0]['step_s']:.2f}, "
                 f"host CPU {med[1]['host_cpu'] / med[0]['host_cpu']:.2f}, transport CPU "
                 f"{med[1]['transport_cpu'] / med[0]['transport_cpu']:.2f}.\n")
    lines.append("Per run: " + "; ".join(
        f"{r['value']}/{r['repeat']}: {r['step_s']:.3f} s, host {r['host_cpu']:.3f}, "
        f"transport {r['transport_cpu']:.3f}, others {r['other_cores']:.2f} cores"
        for r in runs))
    out = HERE / "results" / "shm_train_ab"
    out.with_suffix(".json").write_text(json.dumps({"command": sys.argv, "started": started,
                                                    "runs": runs, "medians": med}, indent=1))
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

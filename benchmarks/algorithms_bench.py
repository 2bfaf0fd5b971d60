"""Bagua's algorithms (docs/algorithms.md) next to the summation path on emulated hosts:
bytes per step, step time and time to a held-out accuracy on the digits MLP, widened so
communication counts (examples/train_digits_algorithms.py --width).

    python3 benchmarks/algorithms_bench.py                      # 4 hosts, 1 Gbit/s (~5 min)
    python3 benchmarks/algorithms_bench.py --algorithms allreduce,decentralized --epochs 4

One network namespace per host, tbf on each link (benchmarks/netns.py); on every host a
worker and a ps_server (BytePS's colocated layout, benchmarks/ps_cluster.py). One job per
algorithm, in turn, on the same hosts. Bytes: what all hosts' eth0 sent during the job
(start-up, broadcast and evaluations included) over (steps x hosts). Step time: each
worker's median step after the first epoch, then the median over workers. Time to
target: seconds of training (the accuracy checks excluded) until the worker's held-out
accuracy, checked after each epoch, first reached --target; the slowest worker counts.

Writes benchmarks/results/algorithms/<tag>.json, .md and <tag>_time_to_accuracy.png.
"""

import argparse
import datetime
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from netns import Hosts, available  # noqa: E402
from ps_cluster import REPO, ClusterError, NetnsCluster  # noqa: E402
from train_bench import CHILD_ENV, machine_busy_s, own_cpu_s  # noqa: E402

SCRIPT = REPO / "examples" / "train_digits_algorithms.py"
ALGORITHMS = ["allreduce", "decentralized", "shift_one", "low_precision", "async", "qadam"]
RESULT = re.compile(r"result algorithm=(\w+) rank=(\d+) accuracy=([\d.]+) seconds=([\d.]+) "
                    r"steps=(\d+) loss=([\d.na]+) step_ms=([\d.]+)(?: to_target=([\d.]+))?")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rate", default="1gbit")
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--target", type=float, default=0.93)
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS))
    parser.add_argument("--timeout", type=float, default=400)
    parser.add_argument("--tag", default=None)
    return parser.parse_args()


def run_job(args, hosts, name, workdir):
    env = dict(CHILD_ENV, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    cluster = NetnsCluster(hosts, workdir, timeout=args.timeout, env=env)
    sent0 = [hosts.link_bytes(i)[0] for i in range(hosts.n)]
    busy0, ours0, t0 = machine_busy_s(), own_cpu_s(), time.monotonic()
    try:
        cluster.start(lambda rank: [sys.executable, str(SCRIPT), "--algorithms", name,
                                    "--width", str(args.width), "--epochs", str(args.epochs),
                                    "--target", str(args.target)])
        cluster.wait()
        cluster.check()
        outputs = [cluster.result("worker", r).stdout for r in range(hosts.n)]
    finally:
        cluster.close()
    wall = time.monotonic() - t0
    sent = sum(hosts.link_bytes(i)[0] - sent0[i] for i in range(hosts.n))
    rows = [m for out in outputs for m in RESULT.findall(out)]
    if len(rows) != hosts.n:
        raise ClusterError(f"{name}: {len(rows)} result lines from {hosts.n} workers")
    steps = int(rows[0][4])
    reached = [float(r[7]) if r[7] else None for r in rows]
    return dict(
        algorithm=name, steps=steps,
        accuracy=[float(r[2]) for r in rows],
        step_ms=statistics.median(float(r[6]) for r in rows),
        fit_s=max(float(r[3]) for r in rows),
        bytes_per_step=sent / (steps * hosts.n),
        time_to_target_s=None if None in reached else max(reached),
        wall_s=round(wall, 1),
        other_cores=round(max(0.0, machine_busy_s() - busy0 - (own_cpu_s() - ours0)) / wall, 2))


def table(rows, params):
    base = next((r for r in rows if r["algorithm"] == "allreduce"), None)
    lines = ["| algorithm | bytes sent / worker / step | x model | step (ms) | vs allreduce "
             "| time to target (s) | held-out accuracy (min..max) | others' cores |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = (r["step_ms"] / base["step_ms"]) if base else float("nan")
        ttt = "not reached" if r["time_to_target_s"] is None else f"{r['time_to_target_s']:.1f}"
        lines.append(
            f"| {r['algorithm']} | {r['bytes_per_step'] / 1e6:.2f} MB | "
            f"{r['bytes_per_step'] / (4 * params):.2f} | {r['step_ms']:.1f} | {ratio:.2f} | "
            f"{ttt} | {min(r['accuracy']):.3f}..{max(r['accuracy']):.3f} | "
            f"{r['other_cores']:.2f} |")
    return "\n".join(lines)


def plot(path, rows, meta):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    names = [r["algorithm"] for r in rows]
    ttt = [r["time_to_target_s"] or 0.0 for r in rows]
    left.bar(names, ttt, color="tab:blue")
    for i, r in enumerate(rows):
        if r["time_to_target_s"] is None:
            left.text(i, 0, "not\nreached", ha="center", va="bottom", fontsize=8)
    left.set_ylabel(f"seconds to {meta['target']:.0%} held-out accuracy")
    right.bar(names, [r["bytes_per_step"] / 1e6 for r in rows], color="tab:orange")
    right.set_ylabel("MB sent per worker per step")
    for ax in (left, right):
        ax.tick_params(axis="x", rotation=30)
    fig.suptitle(f"digits MLP width {meta['width']}, {meta['workers']} hosts at "
                 f"{meta['rate']} (tbf), one worker + one ps_server per host")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    args = parse_args()
    ok, why = available()
    if not ok:
        sys.exit(f"algorithms_bench needs network namespaces: {why}")
    names = args.algorithms.split(",")
    tag = args.tag or f"{args.workers}hosts_{args.rate}_w{args.width}"
    out = HERE / "results" / "algorithms"
    out.mkdir(parents=True, exist_ok=True)
    params = 64 * args.width + args.width + args.width * args.width + args.width \
        + args.width * 10 + 10
    rows = []
    with tempfile.TemporaryDirectory(prefix="algorithms_bench.") as workdir, \
            Hosts(args.workers, rate=args.rate) as hosts:
        for name in names:
            try:
                row = run_job(args, hosts, name, Path(workdir) / name)
            except ClusterError as e:
                print(f"FAILED {name}:\n{e}", flush=True)
                rows.append(dict(algorithm=name, failed=str(e)[-2000:]))
                continue
            print(json.dumps(row), flush=True)
            rows.append(row)
    good = [r for r in rows if "failed" not in r]
    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                command="python3 " + " ".join(["benchmarks/algorithms_bench.py"] + sys.argv[1:]),
                workers=args.workers, rate=args.rate, width=args.width, params=params,
                epochs=args.epochs, target=args.target)
    (out / f"{tag}.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    text = (f"# Algorithms at {args.rate}, {args.workers} hosts, digits MLP width {args.width} "
            f"({params / 1e6:.2f} M parameters, {4 * params / 1e6:.1f} MB)\n\n"
            f"`{meta['command']}` ({meta['date']})\n\n{table(good, params)}\n")
    (out / f"{tag}.md").write_text(text)
    if good:
        plot(out / f"{tag}_time_to_accuracy.png", good, meta)
    print(text)


if __name__ == "__main__":
    main()

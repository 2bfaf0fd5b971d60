"""Bagua's algorithms (docs/algorithms.md) next to the summation path on emulated hosts:
bytes per step, step time and time to a held-out accuracy on the digits MLP, widened so
communication counts (examples/train_digits_algorithms.py --width).

    python3 benchmarks/algorithms_bench.py                      # 4 hosts, 1 Gbit/s (~5 min)
    python3 benchmarks/algorithms_bench.py --algorithms allreduce,decentralized --epochs 4
    python3 benchmarks/algorithms_bench.py --delay-ms 0,10,25   # + one-way link delay

--delay-ms joins the hosts through benchmarks/delay_link.py (TUN devices and a relay that
holds every packet that long: RTT = 2 x delay) instead of a bridge, for each delay in turn;
0 measures the relay without delay. Each delay gets its own table and PNG
(<tag>_d<D>ms), and with several delays a combined table and PNG (<tag>_delays).

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
from delay_link import DelayHosts, tun_available  # noqa: E402
from machine_load import machine_busy_s, own_cpu_s  # noqa: E402
from netns import Hosts, available  # noqa: E402
from ps_cluster import REPO, ClusterError, NetnsCluster  # noqa: E402
from train_config import CHILD_ENV  # noqa: E402

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
    parser.add_argument("--fusion-bytes", type=int, default=0,
                        help="passed to the example: decentralized algorithms exchange flat "
                             "messages of up to this many bytes (0: one per variable)")
    parser.add_argument("--delay-ms", default=None,
                        help="comma-separated one-way link delays in ms (TUN relay, "
                             "benchmarks/delay_link.py); default: the plain bridge")
    return parser.parse_args()


def run_job(args, hosts, name, workdir):
    env = dict(CHILD_ENV, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    cluster = NetnsCluster(hosts, workdir, timeout=args.timeout, env=env)
    sent0 = [hosts.link_bytes(i)[0] for i in range(hosts.n)]
    busy0, ours0, t0 = machine_busy_s(), own_cpu_s(), time.monotonic()
    try:
        cluster.start(lambda rank: [sys.executable, str(SCRIPT), "--algorithms", name,
                                    "--width", str(args.width), "--epochs", str(args.epochs),
                                    "--target", str(args.target),
                                    "--fusion-bytes", str(args.fusion_bytes)])
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
        ratio = (r["step_ms"] / base["step_ms"]) if base and base["step_ms"] else float("nan")
        ttt = "not reached" if r["time_to_target_s"] is None else f"{r['time_to_target_s']:.1f}"
        lines.append(
            f"| {r['algorithm']} | {r['bytes_per_step'] / 1e6:.2f} MB | "
            f"{r['bytes_per_step'] / (4 * params):.2f} | {r['step_ms']:.1f} | {ratio:.2f} | "
            f"{ttt} | {min(r['accuracy']):.3f}..{max(r['accuracy']):.3f} | "
            f"{r['other_cores']:.2f} |")
    return "\n".join(lines)


def plot(path, rows, meta):
    if meta.get("delay_ms") is not None:
        meta = dict(meta, rate="%s + %g ms one way (TUN relay)" % (meta["rate"],
                                                                   meta["delay_ms"]))
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


def run_setting(args, names, params, delay_ms, tag):
    """All algorithms on one set of hosts: plain bridge (delay_ms None) or the relay."""
    out = HERE / "results" / "algorithms"
    out.mkdir(parents=True, exist_ok=True)
    rows, relay = [], None
    if delay_ms is None:
        make_hosts = lambda: Hosts(args.workers, rate=args.rate)  # noqa: E731
    else:
        make_hosts = lambda: DelayHosts(args.workers, rate=args.rate,  # noqa: E731
                                        delay_ms=delay_ms)
    with tempfile.TemporaryDirectory(prefix="algorithms_bench.") as workdir, \
            make_hosts() as hosts:
        for name in names:
            try:
                row = run_job(args, hosts, name, Path(workdir) / name)
            except ClusterError as e:
                print(f"FAILED {name}:\n{e}", flush=True)
                rows.append(dict(algorithm=name, failed=str(e)[-2000:]))
                continue
            row["delay_ms"] = delay_ms
            print(json.dumps(row), flush=True)
            rows.append(row)
        if delay_ms is not None:
            time.sleep(0.6)  # the relay writes its counters every 0.5 s
            relay = hosts.relay_stats()
    good = [r for r in rows if "failed" not in r]
    meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                command="python3 " + " ".join(["benchmarks/algorithms_bench.py"] + sys.argv[1:]),
                workers=args.workers, rate=args.rate, width=args.width, params=params,
                epochs=args.epochs, target=args.target, delay_ms=delay_ms, relay=relay,
                fusion_bytes=args.fusion_bytes)
    (out / f"{tag}.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    link = args.rate if delay_ms is None else (
        f"{args.rate} + {delay_ms:g} ms one-way delay (TUN relay, RTT {2 * delay_ms:g} ms)")
    relay_line = "" if relay is None else (
        f"Relay: {relay['packets']} packets, {relay['dropped_queue_full']} dropped (queue "
        f"full), delivered on average {relay.get('late_ms_mean', 0):.2f} ms after due "
        f"(max {relay['late_ms_max']:.1f} ms).\n\n")
    text = (f"# Algorithms at {link}, {args.workers} hosts, digits MLP width {args.width} "
            f"({params / 1e6:.2f} M parameters, {4 * params / 1e6:.1f} MB)\n\n"
            f"`{meta['command']}` ({meta['date']})\n\n{relay_line}{table(good, params)}\n")
    (out / f"{tag}.md").write_text(text)
    if good:
        plot(out / f"{tag}_time_to_accuracy.png", good, meta)
    print(text, flush=True)
    return good, meta


def combined_table(settings, params):
    names = []
    for rows, _ in settings:
        names += [r["algorithm"] for r in rows if r["algorithm"] not in names]
    head = ["| algorithm | MB / worker / step |"]
    for _, meta in settings:
        d = meta["delay_ms"]
        head.append(f" step ms @ {d:g} ms | vs allreduce | to target s @ {d:g} ms |")
    lines = ["".join(head), "|---|---|" + "---|---|---|" * len(settings)]
    for name in names:
        cells = [f"| {name} |"]
        mb = [r["bytes_per_step"] / 1e6 for rows, _ in settings for r in rows
              if r["algorithm"] == name]
        cells.append(" " + "/".join(f"{m:.2f}" for m in mb) + " |")
        for rows, _ in settings:
            row = next((r for r in rows if r["algorithm"] == name), None)
            base = next((r for r in rows if r["algorithm"] == "allreduce"), None)
            if row is None:
                cells.append(" failed | | |")
                continue
            ratio = row["step_ms"] / base["step_ms"] if base and base["step_ms"] else float("nan")
            ttt = "not reached" if row["time_to_target_s"] is None \
                else f"{row['time_to_target_s']:.1f}"
            cells.append(f" {row['step_ms']:.1f} | {ratio:.2f} | {ttt} |")
        lines.append("".join(cells))
    return "\n".join(lines)


def combined_plot(path, settings, args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    for rows, _ in settings:
        names += [r["algorithm"] for r in rows if r["algorithm"] not in names]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / len(settings)
    for k, (rows, meta) in enumerate(settings):
        by = {r["algorithm"]: r for r in rows}
        xs = [i + (k - (len(settings) - 1) / 2) * width for i in range(len(names))]
        label = f"{meta['delay_ms']:g} ms one way"
        ttt = [(by[n]["time_to_target_s"] or 0.0) if n in by else 0.0 for n in names]
        left.bar(xs, ttt, width, label=label)
        for x, n in zip(xs, names):
            if n not in by or by[n]["time_to_target_s"] is None:
                left.text(x, 0, "x", ha="center", va="bottom", fontsize=8)
        right.bar(xs, [by[n]["step_ms"] if n in by else 0.0 for n in names], width,
                  label=label)
    left.set_ylabel(f"seconds to {args.target:.0%} held-out accuracy (x: not reached)")
    right.set_ylabel("median step (ms)")
    for ax in (left, right):
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=30)
        ax.legend(fontsize=8)
    fig.suptitle(f"digits MLP width {args.width}, {args.workers} hosts at {args.rate} (tbf) "
                 f"+ one-way delay (TUN relay), one worker + one ps_server per host")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    args = parse_args()
    ok, why = available()
    if not ok:
        sys.exit(f"algorithms_bench needs network namespaces: {why}")
    names = args.algorithms.split(",")
    tag = args.tag or f"{args.workers}hosts_{args.rate}_w{args.width}"
    params = 64 * args.width + args.width + args.width * args.width + args.width \
        + args.width * 10 + 10
    if args.delay_ms is None:
        run_setting(args, names, params, None, tag)
        return
    ok, why = tun_available()
    if not ok:
        sys.exit(f"--delay-ms needs TUN devices: {why}")
    delays = [float(d) for d in args.delay_ms.split(",")]
    settings = [run_setting(args, names, params, d, f"{tag}_d{d:g}ms") for d in delays]
    if len(settings) > 1:
        out = HERE / "results" / "algorithms"
        command = "python3 " + " ".join(["benchmarks/algorithms_bench.py"] + sys.argv[1:])
        text = (f"# Algorithms at {args.rate} with one-way link delays of "
                f"{', '.join(f'{d:g}' for d in delays)} ms, {args.workers} hosts, digits MLP "
                f"width {args.width}\n\n`{command}`\n\nMB / worker / step is listed per "
                f"delay (same order). Step: median; vs allreduce: step over allreduce's at "
                f"the same delay; to target: seconds of training to {args.target:.0%} "
                f"held-out accuracy, slowest worker.\n\n{combined_table(settings, params)}\n")
        (out / f"{tag}_delays.md").write_text(text)
        combined_plot(out / f"{tag}_delays_time_to_accuracy.png", settings, args)
        print(text)


if __name__ == "__main__":
    main()

"""Tables, plots and summaries of push_pull_bench.py's measurements.

    python3 benchmarks/push_pull_bench.py --render NAME   # rewrite results/NAME.{md,png}
"""

import datetime
import json
import os
import platform
import statistics
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
KB, MB = 1 << 10, 1 << 20
BIG = 16 * MB  # the target (>= 90% of the link rate) is about tensors this large and up


def rate_bits(rate):
    """tc rate text -> bit/s (tc's units are decimal: 1gbit = 1e9 bit/s); None if unlimited."""
    if rate in (None, "none"):
        return None
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3, "bit": 1.0}
    for unit, factor in units.items():
        if rate.endswith(unit):
            return float(rate[:-len(unit)]) * factor
    raise ValueError("unknown rate %r (use e.g. 1gbit, 500mbit, none)" % rate)


def human(nbytes):
    for unit, size in (("GB", 1 << 30), ("MB", MB), ("KB", KB)):
        if nbytes >= size:
            return "%g %s" % (nbytes / size, unit)
    return "%d B" % nbytes


def busbw_bits(n, nbytes, seconds):
    return nbytes / seconds * 2 * (n - 1) / n * 8


def summarise(n, rate, nbytes, runs):
    """One table row from the repeats of one (n, rate, size): medians over repeats of the
    slowest rank's mean time (push_pull is synchronous, so ranks differ by microseconds)."""
    times, wcpu, scpu = [], [], []
    for run in runs:
        rows = [row for rank_rows in run["per_rank"].values() for row in rank_rows
                if row["bytes"] == nbytes]
        times.append(max(row["mean_s"] for row in rows))
        wcpu.append(statistics.mean(row["worker_cpu_s_per_iter"] for row in rows))
        server = [row["server_cpu_s_per_iter"] for row in rows
                  if row["server_cpu_s_per_iter"] is not None]
        scpu.append(statistics.mean(server) if server else float("nan"))
    t = statistics.median(times)
    algbw = nbytes / t
    busbw = algbw * 2 * (n - 1) / n
    link = rate_bits(rate)
    iters = next(r["iters"] for r in runs[0]["per_rank"][0] if r["bytes"] == nbytes)
    return {
        "hosts": n, "rate": rate, "bytes": nbytes, "iters": iters,
        "time_s": t, "time_s_runs": times,
        "algbw_gbit_s": algbw * 8 / 1e9, "busbw_gbit_s": busbw * 8 / 1e9,
        "busbw_over_link": None if link is None else busbw * 8 / link,
        "busbw_over_link_runs": None if link is None else
        [nbytes / x * 2 * (n - 1) / n * 8 / link for x in times],
        "worker_cpu_s_per_iter": statistics.median(wcpu),
        "server_cpu_s_per_iter": statistics.median(scpu),
    }


def collect(plan, configs, runs, failures, env, command):
    """Table rows (medians over sweeps) and the run's metadata."""
    rows = [summarise(n, rate, nbytes, runs[(n, rate)])
            for n, rate in configs if runs[(n, rate)] for nbytes in plan["sizes"]]
    tcp = {}
    for rate in plan["rates"]:
        values = [run["tcp_gbit_s"] for (n, r), rs in runs.items() if r == rate for run in rs]
        if values:
            tcp[rate] = statistics.median(values)
    big_eff = {}
    for n, rate in configs:
        fr = [r["busbw_over_link"] for r in rows if r["hosts"] == n and r["rate"] == rate
              and r["bytes"] >= BIG and r["busbw_over_link"] is not None]
        if fr:
            big_eff["%d hosts, %s" % (n, rate)] = (min(fr), statistics.median(fr))
    all_runs = [run for rs in runs.values() for run in rs]
    loads = [run["loadavg_before"][0] for run in all_runs] or [float("nan")]
    meta = {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "git": git_describe(), "repeats": plan["repeats"], "plan": plan, "env": env,
        "machine": "%s, %d CPUs, kernel %s" % (platform.machine(), os.cpu_count(),
                                                platform.release()),
        "loadavg_range": "%.2f..%.2f" % (min(loads), max(loads)),
        "other_cpu_s": sum(run["other_cpu_s"] for run in all_runs),
        "wall_s": sum(run["wall_s"] for run in all_runs),
        "max_other_fraction": max([run["other_cpu_fraction"] for run in all_runs] or [0]),
        "tcp_gbit_s": tcp, "big_tensor_efficiency": big_eff, "failures": failures,
        "command": command,
    }
    return rows, meta


def git_describe():
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def pivot(rows):
    """busbw in Gbit/s (and busbw/link) per size (rows) and configuration (columns)."""
    configs = list(dict.fromkeys((r["hosts"], r["rate"]) for r in rows))
    cell = {(r["hosts"], r["rate"], r["bytes"]): r for r in rows}
    lines = ["| size | " + " | ".join("%d hosts, %s" % c for c in configs) + " |",
             "|---" * (len(configs) + 1) + "|"]
    for nbytes in sorted({r["bytes"] for r in rows}):
        cells = []
        for n, rate in configs:
            r = cell.get((n, rate, nbytes))
            if r is None:
                cells.append("")
            elif r["busbw_over_link"] is None:
                cells.append("%.2f" % r["busbw_gbit_s"])
            else:
                cells.append("%.2f (%.0f%%)" % (r["busbw_gbit_s"], 100 * r["busbw_over_link"]))
        lines.append("| %s | %s |" % (human(nbytes), " | ".join(cells)))
    return lines


def markdown(rows, meta, command):
    lines = [
        "# push_pull micro-benchmark", "",
        "Command: `%s` (%s, %d sweep(s), %s)." % (command, meta["date"], meta["repeats"],
                                                  meta["git"]),
        "Each host runs one ps_server and one worker; bandwidth in Gbit/s (1e9 bit/s, as tc "
        "counts). busbw = algbw * 2(n-1)/n; `busbw/link` is against the tbf rate. Times are "
        "the median over sweeps of the mean per push_pull; CPU is CPU-seconds per push_pull "
        "per process.", "",
        "busbw in Gbit/s (busbw / link rate):", "",
        *pivot(rows), "",
        "All numbers:", "",
        "| hosts | link | size | iters | time (ms) | algbw | busbw | busbw/link "
        "| worker CPU-s | server CPU-s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        frac = "-" if r["busbw_over_link"] is None else "%.1f%%" % (100 * r["busbw_over_link"])
        lines.append("| %d | %s | %s | %d | %.3f | %.3f | %.3f | %s | %.4f | %.4f |" % (
            r["hosts"], r["rate"], human(r["bytes"]), r["iters"], r["time_s"] * 1e3,
            r["algbw_gbit_s"], r["busbw_gbit_s"], frac, r["worker_cpu_s_per_iter"],
            r["server_cpu_s_per_iter"]))
    lines += ["", "Raw TCP, one stream host 0 -> host 1 (median Gbit/s): " + ", ".join(
        "%s %.3f" % (rate, v) for rate, v in meta["tcp_gbit_s"].items()), ""]
    lines += ["Tensors >= %s, busbw/link (min .. median):" % human(BIG), ""]
    for key, (lo, mid) in meta["big_tensor_efficiency"].items():
        lines.append("- %s: %.1f%% .. %.1f%%" % (key, 100 * lo, 100 * mid))
    lines += ["", "Machine: %s; load average before each configuration: %s; other processes "
              "used %.1f CPU-s during the %.0f s of runs (at most %.0f%% of the CPUs in one "
              "configuration)." % (meta["machine"], meta["loadavg_range"], meta["other_cpu_s"],
                                   meta["wall_s"], 100 * meta["max_other_fraction"]), ""]
    return "\n".join(lines)


def plot(rows, path, tcp):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rates = list(dict.fromkeys(r["rate"] for r in rows))
    fig, axes = plt.subplots(1, len(rates), figsize=(5 * len(rates), 4), squeeze=False)
    for ax, rate in zip(axes[0], rates):
        for n in sorted({r["hosts"] for r in rows}):
            pts = [r for r in rows if r["rate"] == rate and r["hosts"] == n]
            ax.plot([r["bytes"] for r in pts], [r["busbw_gbit_s"] for r in pts], "o-",
                    label="%d hosts" % n)
        link = rate_bits(rate)
        if link:
            ax.axhline(link / 1e9, color="k", ls="--", lw=1, label="link rate")
            ax.axhline(0.9 * link / 1e9, color="grey", ls=":", lw=1, label="90% target")
        if rate in tcp:
            ax.axhline(tcp[rate], color="tab:red", ls="-.", lw=1, label="raw TCP stream")
        ax.set_xscale("log", base=2)
        sizes = sorted({r["bytes"] for r in rows})
        ax.set_xticks(sizes, [human(b).replace(" ", "") for b in sizes], rotation=45,
                      fontsize=8)
        ax.minorticks_off()
        ax.set_title("link: %s" % rate)
        ax.set_xlabel("tensor size (float32)")
        ax.set_ylabel("busbw (Gbit/s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("tf_ps_ops push_pull, colocated servers, float32")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(name):
    out_dir = HERE / "results"
    data = json.loads((out_dir / (name + ".json")).read_text())
    command = data["meta"].get("command", "python3 benchmarks/push_pull_bench.py")
    (out_dir / (name + ".md")).write_text(markdown(data["rows"], data["meta"], command))
    plot(data["rows"], out_dir / (name + "_busbw.png"), data["meta"]["tcp_gbit_s"])
    print("rewrote %s/%s.md and %s_busbw.png" % (out_dir, name, name))

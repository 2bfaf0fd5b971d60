"""push_pull micro-benchmark on emulated hosts (network namespaces, tbf-limited links).

    python3 benchmarks/push_pull_bench.py            # full sweep, writes benchmarks/results/
    python3 benchmarks/push_pull_bench.py --quick    # 2 hosts, 4 sizes, about 15 s

Every host runs one ps_server and one worker (BytePS's colocated mode); host 0 also runs
the scheduler. Workers are TensorFlow-free (the pybind11 core). For each number of hosts
n, link rate and tensor size (float32): a warm-up, then timed iterations (~1.5 s, >= 3).
Reported as nccl-tests does for all-reduce:
    algbw = bytes / time,  busbw = algbw * 2(n-1)/n,  efficiency = busbw / link rate
(2(n-1)/n * bytes is what each host must send per push_pull when every host serves 1/n
of the tensor, the all-reduce optimum; see shared/notes/ALGORITHMS.md.) Sweeps repeat
(--repeats) and the median per point is reported. A raw TCP stream per link rate gives
the ceiling. Needs root (namespaces) and the native build.
"""

import argparse
import json
import math
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from netns import Hosts, available  # noqa: E402
from ps_cluster import ClusterError, NetnsCluster  # noqa: E402
from push_pull_report import (BIG, busbw_bits, collect, human, markdown, plot,  # noqa: E402
                              rate_bits, render)

KB, MB = 1 << 10, 1 << 20
FULL = dict(hosts=[2, 3], rates=["1gbit", "10gbit", "none"],
            sizes=[KB, 4 * KB, 16 * KB, 64 * KB, 256 * KB, MB, 4 * MB, 16 * MB, 64 * MB,
                   256 * MB], repeats=3, target=1.5)
QUICK = dict(hosts=[2], rates=["1gbit", "10gbit"], sizes=[4 * KB, MB, 16 * MB, 64 * MB],
             repeats=1, target=0.5)
UNLIMITED_GUESS = 12e9  # bit/s, only for the duration estimate


# --- duration estimate -----------------------------------------------------------------

def estimate_iteration_s(n, rate, nbytes):
    bits = rate_bits(rate) or UNLIMITED_GUESS
    return 3e-4 + nbytes * 2 * (n - 1) / n * 8 / (0.9 * bits)


def estimate_config_s(n, rate, sizes, target):
    total = 3.0  # namespaces, processes, rendezvous, shutdown
    for nbytes in sizes:
        t = estimate_iteration_s(n, rate, nbytes)
        warmup = 1 if nbytes >= 64 * MB else 3
        total += (warmup + min(1000, max(3, math.ceil(target / t)))) * t
    return total


# --- CPU accounting ---------------------------------------------------------------------

def machine_busy_s():
    """CPU-seconds all CPUs spent busy since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(v) for v in f.read().split()[:3]]


def own_cpu_s():
    """CPU of this driver and of its reaped children (the cluster)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


# --- one configuration ------------------------------------------------------------------

def tcp_probe(hosts, workdir, seconds=1.0):
    """One TCP stream host 0 -> host 1: Gbit/s of payload, CPU-s per GB at both ends."""
    probe = HERE / "tcp_probe.py"
    port_file = str(Path(workdir) / "probe.port")
    with open(Path(workdir) / "probe.out", "w+") as out, \
            open(Path(workdir) / "probe.err", "w+") as err:
        receiver = hosts.popen(1, [sys.executable, probe, "serve", hosts.address(1), port_file],
                               stdout=out, stderr=err)
        limit = time.monotonic() + 10
        while not os.path.exists(port_file):
            if receiver.poll() is not None or time.monotonic() > limit:
                receiver.kill()
                receiver.wait()
                err.seek(0)
                raise ClusterError("tcp probe receiver failed:\n" + err.read())
            time.sleep(0.02)
        port = int(Path(port_file).read_text())
        sender = hosts.run(0, [sys.executable, probe, "send",
                               "%s:%d" % (hosts.address(1), port), seconds],
                           timeout=seconds + 30, capture_output=True, text=True)
        try:
            receiver.wait(timeout=30)
        except subprocess.TimeoutExpired:
            receiver.kill()
            receiver.wait()
        out.seek(0)
        err.seek(0)
        if sender.returncode != 0 or receiver.returncode != 0:
            raise ClusterError("tcp probe failed: sender exit %s: %s\nreceiver exit %s: %s" % (
                sender.returncode, sender.stderr, receiver.returncode, err.read()))
        result = json.loads(out.read())
        result.update(json.loads(sender.stdout))
        return result


def run_config(n, rate, sizes, target, workdir, env, verbose=True):
    """Runs one cluster over all sizes on fresh hosts. Returns the workers' rows per rank,
    the raw TCP probe, and the CPU other processes used meanwhile."""
    expected = estimate_config_s(n, rate, sizes, target)
    timeout = 3 * expected + 60
    Path(workdir).mkdir(parents=True, exist_ok=True)
    busy0, own0, wall0 = machine_busy_s(), own_cpu_s(), time.monotonic()
    load = loadavg()
    with Hosts(n, rate=None if rate == "none" else rate) as hosts:
        tcp = tcp_probe(hosts, workdir)
        cluster = NetnsCluster(hosts, workdir, timeout=timeout, env=env)
        worker = [sys.executable, HERE / "push_pull_worker.py", "--sizes",
                  ",".join(str(s) for s in sizes), "--target-seconds", target]
        log = Path(workdir) / "worker0.err"
        shown = [0]

        def progress():
            if not verbose or not log.exists():
                return
            text = log.read_text(errors="replace")
            for line in text[shown[0]:].splitlines(keepends=True):
                if line.endswith("\n"):
                    print("      " + line.rstrip(), flush=True)
                    shown[0] += len(line)

        try:
            cluster.start(lambda rank: worker)
            cluster.wait(tick=progress)
            progress()
            cluster.check()
            results = cluster.results()
        finally:
            cluster.close()
        left = hosts.leftovers
    if left():
        raise ClusterError("namespaces left behind: %s" % left())
    wall = time.monotonic() - wall0
    other = machine_busy_s() - busy0 - (own_cpu_s() - own0)
    per_rank = {}
    for r in results:
        if r.role == "worker":
            per_rank[r.index] = [json.loads(line) for line in r.stdout.splitlines()
                                 if line.startswith("{")]
    return {"tcp_gbit_s": tcp["gbit_s"], "tcp": tcp, "wall_s": wall, "loadavg_before": load,
            "other_cpu_s": max(0.0, other),
            "cpu_s": {"%s%d" % (r.role, r.index): r.cpu_s for r in results},
            "per_rank": per_rank}


# --- main -------------------------------------------------------------------------------

def wait_for_idle(max_busy, limit_s, window_s=2.0):
    """Waits until the machine's CPUs were busy less than `max_busy` (a fraction) over a
    window with nothing of ours running, or `limit_s` passed; returns the last fraction."""
    deadline = time.monotonic() + limit_s
    while True:
        busy0 = machine_busy_s()
        time.sleep(window_s)
        busy = (machine_busy_s() - busy0) / (window_s * os.cpu_count())
        if busy < max_busy or time.monotonic() > deadline:
            return busy
        print("  machine busy (%.0f%% of the CPUs); waiting for it to go idle" % (100 * busy),
              flush=True)
        time.sleep(10)


def sweeps(plan, configs, runs, failures, logs_root, env, args):
    for sweep in range(plan["repeats"]):
        for n, rate in configs:
            for attempt in range(1 + args.retries):
                expected = estimate_config_s(n, rate, plan["sizes"], plan["target"])
                busy = None
                if args.max_other is not None:
                    busy = wait_for_idle(args.max_other, args.idle_limit)
                print("[sweep %d/%d] %d hosts, link %s (load %s; expected %.0f s) ..." % (
                    sweep + 1, plan["repeats"], n, rate, loadavg()[0], expected), flush=True)
                workdir = logs_root / ("s%d-n%d-%s-a%d" % (sweep, n, rate, attempt))
                try:
                    run = run_config(n, rate, plan["sizes"], plan["target"], workdir, env)
                except (ClusterError, OSError, subprocess.SubprocessError) as e:
                    print("  FAILED:\n%s" % e, file=sys.stderr, flush=True)
                    failures.append("%d hosts, %s: %s" % (n, rate, str(e).splitlines()[0]))
                    break
                other = run["other_cpu_s"] / (run["wall_s"] * os.cpu_count())
                run["other_cpu_fraction"] = other
                run["busy_before"] = busy
                print("  done in %.1f s; raw TCP %.2f Gbit/s; other processes used %.0f%% of "
                      "the CPUs%s" % (run["wall_s"], run["tcp_gbit_s"], 100 * other,
                                      describe_big(run, n, rate)), flush=True)
                if args.max_other is None or other <= args.max_other or attempt == args.retries:
                    run["attempts"] = attempt + 1
                    runs[(n, rate)].append(run)
                    break
                print("  contaminated by other processes: running it again", flush=True)


def describe_big(run, n, rate):
    """"; 16 MB busbw 0.93 Gbit/s (93%)..." for rank 0's large tensors."""
    link = rate_bits(rate)
    text = ""
    for row in run["per_rank"][0]:
        if row["bytes"] >= BIG:
            bits = busbw_bits(n, row["bytes"], row["mean_s"])
            text += "; %s busbw %.2f Gbit/s" % (human(row["bytes"]), bits / 1e9)
            text += " (%.0f%%)" % (100 * bits / link) if link else ""
    return text

def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 hosts, 4 sizes, 1 sweep")
    parser.add_argument("--hosts", help="comma-separated host counts (default 2,3)")
    parser.add_argument("--rates", help="comma-separated tc rates or none (default "
                        "1gbit,10gbit,none)")
    parser.add_argument("--sizes", help="comma-separated byte counts")
    parser.add_argument("--repeats", type=int, help="sweeps; the median is reported")
    parser.add_argument("--target-seconds", type=float, help="timed seconds per size")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="extra environment for every role, e.g. TFPS_PARTITION_BYTES=1048576")
    parser.add_argument("--out", help="output name under benchmarks/results/ (default "
                        "push_pull, or push_pull_quick with --quick)")
    parser.add_argument("--max-other", type=float, default=-1, metavar="FRACTION",
                        help="wait until other processes use less than this fraction of "
                        "the CPUs before each configuration, and run it again (--retries) "
                        "if they used more during it (default 0.1; --quick: off; 0 = off)")
    parser.add_argument("--retries", type=int, default=2)
    parser.add_argument("--idle-limit", type=float, default=900,
                        help="seconds to wait for an idle machine before running anyway")
    parser.add_argument("--render", metavar="NAME",
                        help="only rewrite results/NAME.md and the plot from NAME.json")
    parser.add_argument("--keep-logs", action="store_true", help="keep the process logs")
    return parser.parse_args()


def main():
    args = parse_args()
    if args.render:
        render(args.render)
        return
    plan = dict(QUICK if args.quick else FULL)
    if args.max_other < 0:
        args.max_other = None if args.quick else 0.1
    elif args.max_other == 0:
        args.max_other = None
    if args.hosts:
        plan["hosts"] = [int(v) for v in args.hosts.split(",")]
    if args.rates:
        plan["rates"] = args.rates.split(",")
    if args.sizes:
        plan["sizes"] = [int(v) for v in args.sizes.split(",")]
    if args.repeats:
        plan["repeats"] = args.repeats
    if args.target_seconds:
        plan["target"] = args.target_seconds
    for rate in plan["rates"]:
        rate_bits(rate)
    env = dict(kv.split("=", 1) for kv in args.env)
    env.setdefault("TFPS_TIMEOUT", "60")
    ok, why = available()
    if not ok:
        sys.exit("cannot run: " + why)
    name = args.out or ("push_pull_quick" if args.quick else "push_pull")
    out_dir = HERE / "results"
    out_dir.mkdir(exist_ok=True)
    configs = [(n, rate) for rate in plan["rates"] for n in plan["hosts"]]
    estimate = plan["repeats"] * sum(estimate_config_s(n, rate, plan["sizes"], plan["target"])
                                     for n, rate in configs)
    print("push_pull benchmark: %d configuration(s) x %d size(s) x %d sweep(s); expected "
          "duration about %.0f s (%.1f min)" % (len(configs), len(plan["sizes"]),
                                                plan["repeats"], estimate, estimate / 60),
          flush=True)
    print("load average now: %s" % loadavg(), flush=True)

    runs = {config: [] for config in configs}
    failures = []
    started = time.monotonic()
    logs_root = Path(tempfile.mkdtemp(prefix="tfps-bench-"))
    try:
        sweeps(plan, configs, runs, failures, logs_root, env, args)
    except BaseException:
        print("interrupted; process logs kept in %s" % logs_root, file=sys.stderr)
        raise

    command = "python3 benchmarks/push_pull_bench.py"
    if sys.argv[1:]:
        command += " " + shlex.join(sys.argv[1:])
    rows, meta = collect(plan, configs, runs, failures, env, command)
    with open(out_dir / (name + ".json"), "w") as f:
        json.dump({"meta": meta, "rows": rows,
                   "runs": {"%d hosts, %s" % k: v for k, v in runs.items()}}, f, indent=1)
    if rows:
        (out_dir / (name + ".md")).write_text(markdown(rows, meta, command))
        plot(rows, out_dir / (name + "_busbw.png"), meta["tcp_gbit_s"])
        print("\n" + markdown(rows, meta, command))
    print("wrote %s/%s.{json,md} and %s_busbw.png in %.0f s" % (
        out_dir, name, name, time.monotonic() - started))
    if failures:
        print("FAILED configurations (logs kept in %s):\n  %s" % (logs_root, "\n  ".join(
            failures)), file=sys.stderr)
        sys.exit(1)
    if args.keep_logs:
        print("logs in %s" % logs_root)
    else:
        shutil.rmtree(logs_root, ignore_errors=True)


if __name__ == "__main__":
    main()

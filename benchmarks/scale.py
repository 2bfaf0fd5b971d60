"""What a job costs as the number of workers N grows: rendezvous time, steady step time of
each collective, and the sockets, threads, RSS and CPU time of each role, for N = 8..64
core workers (no TensorFlow) on this host. The worker is tests/scale/scale_worker.py (a
4 KB + 1 MB push_pull group, a 4 KB broadcast, an allgather, uneven tails and join(),
every answer checked against NumPy); its checks run in every measured job.

    python benchmarks/scale.py [--jobs 8:2,16:2,32:2,64:2,64:1,64:4,64:8] [--steps 6]
                               [--no-allgather] [--out benchmarks/results/scale]

--jobs: N:S pairs, N workers and S servers each. --netns H (root): the workers on H
network-namespace hosts (benchmarks/netns.py), N/H each, with hierarchical aggregation;
the scheduler on host 0, server i on host i*H/S. --no-allgather: the workers leave the
allgather out (a job that never uses the peer mesh, which then is never connected).

Counts come from /proc, sampled every 0.2 s while the job runs; each process's largest
value is kept (sockets: fds that are sockets; threads: /proc/PID/status Threads; RSS:
VmRSS). CPU time is the process's own, from wait4 when it exits. Rendezvous is from the
scheduler's start to rank 0's first step done (rank 0's process start and the engine's
init() are given too). Times depend on the machine's load, which is written next to them;
counts do not. Writes OUT.json, OUT.md and, when matplotlib is there, OUT.png.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from ps_cluster import PS_SERVER  # noqa: E402
from tfps_harness.launch_cluster import LoggedCluster  # noqa: E402

WORKER = REPO / "tests" / "scale" / "scale_worker.py"
ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "TFPS_TIMEOUT": "300",
       "TF_CPP_MIN_LOG_LEVEL": "2", "TFPS_BIND": "127.0.0.1", "TFPS_HIERARCHICAL": "0"}


def read_proc(pid):
    """(sockets, threads, rss_bytes, fds) of a live process, or None once it has gone."""
    try:
        sockets = 0
        fds = os.listdir(f"/proc/{pid}/fd")
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                    sockets += 1
            except OSError:
                pass
        threads = rss = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    threads = int(line.split()[1])
                elif line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
        return sockets, threads, rss, len(fds)
    except OSError:
        return None


class Sampler(threading.Thread):
    """Keeps each process's largest (sockets, threads, rss, fds) while the job runs."""

    def __init__(self, cluster, period=0.2):
        super().__init__(daemon=True)
        self.cluster, self.period = cluster, period
        self.peak = {}  # (role, index) -> [sockets, threads, rss, fds]
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            for p in self.cluster.processes():
                got = read_proc(p.pid)
                if got is None:
                    continue
                peak = self.peak.setdefault((p.role, p.index), [0, 0, 0, 0])
                for i, v in enumerate(got):
                    peak[i] = max(peak[i], v)
            self.stop.wait(self.period)


class NetnsJob(LoggedCluster):
    """Workers spread over `hosts` (netns.Hosts), rank r on host r * H // N."""

    def __init__(self, hosts, *args, **kwargs):
        super().__init__(*args, **kwargs)
        from ps_cluster import netns_host
        self._on = [netns_host(hosts, i) for i in range(hosts.n)]

    def host(self, role, index):
        h = len(self._on)
        if role == "scheduler":
            return self._on[0]
        if role == "server":
            return self._on[index * h // self.num_servers]
        return self._on[index * h // self.num_workers]


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run_sampled(cluster, command, what, period=0.2):
    """Runs `command` as `cluster`'s workers to their end while a Sampler reads /proc,
    then closes the cluster; raises naming the processes that failed. Returns the sampler
    and the seconds from here to the end."""
    started = time.time()
    sampler = Sampler(cluster, period)
    try:
        cluster.start(command)
        sampler.start()
        cluster.wait()
        duration = time.time() - started
        sampler.stop.set()
        sampler.join()
        failed = cluster.failures()
        if failed:
            raise RuntimeError(f"{what}: {len(failed)} processes failed:\n"
                               + "\n".join(r.describe() for r in failed[:3]))
    finally:
        cluster.close()
    return sampler, duration


def measure(workers, servers, steps, hold, workdir, hosts=None, allgather=True):
    if hosts is None:
        cluster = LoggedCluster(PS_SERVER, workdir, workers, servers, timeout=900, env=ENV,
                                cwd=REPO)
    else:  # namespace hosts reach only each other: no key needed, listen on their address
        env = {**ENV, "TFPS_HIERARCHICAL": "1", "TFPS_INSECURE": "1", "TFPS_BIND": None}
        env = {k: v for k, v in env.items() if v is not None}
        cluster = NetnsJob(hosts, PS_SERVER, workdir, workers, servers, timeout=900,
                           env=env, cwd=REPO)
    timings = Path(workdir) / "timings.json"
    load_before = loadavg()
    started = time.time()
    sampler, duration = run_sampled(
        cluster, [sys.executable, WORKER, str(steps), "--timings", str(timings), "--hold",
                  str(hold)] + ([] if allgather else ["--no-allgather"]), f"N={workers}")
    marks = json.loads(timings.read_text())
    roles = {}
    for role in ("scheduler", "server", "worker"):
        peaks = [v for (r, _), v in sampler.peak.items() if r == role]
        cpu = [res.cpu_s for res in cluster.results() if res.role == role]
        roles[role] = {
            "sockets_max": max(p[0] for p in peaks),
            "sockets_median": statistics.median(p[0] for p in peaks),
            "threads_max": max(p[1] for p in peaks), "fds_max": max(p[3] for p in peaks),
            "rss_mb_max": round(max(p[2] for p in peaks) / 2**20, 1),
            "rss_mb_median": round(statistics.median(p[2] for p in peaks) / 2**20, 1),
            "cpu_s_max": round(max(cpu), 2), "cpu_s_total": round(sum(cpu), 2),
            "cpu_per_wall_s": round(max(cpu) / duration, 4),
        }
    m = marks["marks"]
    return {
        "workers": workers, "servers": servers, "steps": steps,
        "hosts": hosts.n if hosts is not None else 1, "duration_s": round(duration, 1),
        "load_before": load_before, "load_after": loadavg(),
        "rank0_started_s": round(m["start"] - started, 2),
        "init_s": round(m["init"] - started, 2),
        "rendezvous_s": round(m["first_step"] - started, 2),
        "steady_s": {k: round(v, 4) for k, v in marks["steady_s"].items()},
        "roles": roles,
        "rank0_stats": marks["stats"],
    }


def table(rows):
    lines = ["| N | S | load | rendezvous s | init s | pp 4K+1M s | bcast 4K s | allgather s "
             "| sched sockets/fds | sched threads | sched RSS MB | sched CPU s (per s) "
             "| server sockets/fds | server threads | server RSS MB | server CPU s "
             "| worker sockets/fds | worker threads | worker RSS MB |",
             "|" + "---|" * 19]
    for r in rows:
        sc, sv, wk = r["roles"]["scheduler"], r["roles"]["server"], r["roles"]["worker"]
        s = r["steady_s"]
        lines.append(
            f"| {r['workers']} | {r['servers']} | {r['load_before']:.0f} | {r['rendezvous_s']} "
            f"| {r['init_s']} | {s['push_pull_4k_1m']} | {s['broadcast_4k']} "
            f"| {s.get('allgather', '-')} "
            f"| {sc['sockets_max']}/{sc['fds_max']} | {sc['threads_max']} | {sc['rss_mb_max']} "
            f"| {sc['cpu_s_max']} ({sc['cpu_per_wall_s']}) "
            f"| {sv['sockets_max']}/{sv['fds_max']} | {sv['threads_max']} | {sv['rss_mb_max']} "
            f"| {sv['cpu_s_max']} "
            f"| {wk['sockets_max']}/{wk['fds_max']} | {wk['threads_max']} "
            f"| {wk['rss_mb_median']} |")
    return "\n".join(lines)


def pyplot():
    """matplotlib's pyplot drawing to files, or None without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, axes, path):
    """N on a log2 axis, legends, and the figure written to `path`."""
    for ax in axes:
        ax.set_xlabel("workers N")
        ax.set_xscale("log", base=2)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def plot(rows, path):
    plt = pyplot()
    if plt is None:
        return False
    rows = [r for r in rows if r["servers"] == rows[0]["servers"]]  # one line per N
    n = [r["workers"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for role, style in (("scheduler", "o-"), ("server", "s-"), ("worker", "^-")):
        axes[0].plot(n, [r["roles"][role]["sockets_max"] for r in rows], style, label=role)
        axes[1].plot(n, [r["roles"][role]["threads_max"] for r in rows], style, label=role)
    axes[0].plot(n, n, "k:", label="N")
    axes[0].set_title("sockets per process (max)")
    axes[1].set_title("threads per process (max)")
    axes[2].plot(n, [r["rendezvous_s"] for r in rows], "o-", label="rendezvous")
    for name in rows[0]["steady_s"]:
        axes[2].plot(n, [r["steady_s"].get(name) for r in rows], "^-", label=name)
    axes[2].set_title("seconds (load-dependent)")
    save_figure(fig, axes, path)
    return True


def write_results(path, rows, text, head, plot=None):
    """PATH.json (rows) and PATH.md (head, then the table `text`); with `plot(rows, png)`
    also PATH.png, shown in the md, when matplotlib is there. Prints the table."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    if plot is not None and plot(rows, out.with_suffix(".png")):
        text += f"\n\n![{out.stem}]({out.with_suffix('.png').name})\n"
    out.with_suffix(".md").write_text(head + "\n\n" + text + "\n")
    print(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", default="8:2,16:2,32:2,64:2,64:1,64:4,64:8",
                        help="N:S pairs: N workers, S servers")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--hold", type=float, default=1.0,
                        help="seconds every worker idles after its steps (a steady sample)")
    parser.add_argument("--netns", type=int, default=0,
                        help="H: run on H namespace hosts, hierarchical (needs root)")
    parser.add_argument("--no-allgather", action="store_true",
                        help="push_pull and broadcast only (no peer mesh)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "scale"))
    args = parser.parse_args()
    rows = []
    hosts = None
    if args.netns:
        from netns import Hosts
        hosts = Hosts(args.netns)
    for job in args.jobs.split(","):
        workers, servers = map(int, job.split(":"))
        with tempfile.TemporaryDirectory(prefix=f"scale{workers}-") as workdir:
            try:
                row = measure(workers, servers, args.steps, args.hold, workdir, hosts,
                              allgather=not args.no_allgather)
            except BaseException:
                if hosts is not None:
                    hosts.close()
                raise
        print(json.dumps(row), flush=True)
        rows.append(row)
    if hosts is not None:
        hosts.close()
    where = (f"{args.netns} namespace hosts, hierarchical" if args.netns else "one host")
    netns = f" --netns {args.netns}" if args.netns else ""
    netns += " --no-allgather" if args.no_allgather else ""
    write_results(
        args.out, rows, table(rows),
        f"# Scale: core workers on {where}\n\n"
        f"`python benchmarks/scale.py --jobs {args.jobs} --steps {args.steps}{netns}`; "
        "load = 1-minute load average before the run (2 cores, shared). Sockets, threads, "
        "RSS: each process's peak, largest of its role (workers' RSS: the median); fds: "
        "every descriptor (eventfds, files too). CPU: seconds of the whole run (the "
        "scheduler's also per second of the run).", plot)


if __name__ == "__main__":
    main()

"""How long an elastic change takes as N grows: core workers (no TensorFlow,
tests/scale/elastic_worker.py) under `tfps-run` with a host discovery script, N = 16..64
on this host. Each job (tests/scale/elastic_job.py) loses worker w<N-1> to a SIGKILL at
step 3, goes on as N-1, then gains a worker when the discovery script's hosts file gets a
slot more; its weights are checked bit for bit against a NumPy replay of each step's
members, in every measured job.

    python benchmarks/scale_elastic.py [--workers 16,32,64] [--repeats 1]
                                       [--out benchmarks/results/scale_elastic]

Loss: from the SIGKILL (the worker writes time.time() just before it) to the driver's
line naming the loss, to its line publishing epoch 1, and to the last survivor's first
step done in epoch 1 (each worker's wall clock, one host). Addition: from the hosts file
written to the driver's line starting the new worker (the script runs about every
second), to the newcomer's join-<id> file (its process started, NumPy and the core
loaded), to epoch 2 published (at the members' next commit), and to the last member's
first step in epoch 2. Per worker also the seconds of its engine's shutdown, of its
rejoin (shutdown + rendezvous), the slowest of each, and their difference: the rendezvous
once the slowest member is there (every member's rendezvous waits for it). Times
depend on the machine's load (written next to them). Writes OUT.json, OUT.md and, when
matplotlib is there, OUT.png.
"""

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "scale"))
from elastic_job import ElasticScaleJob  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
from scale import loadavg, pyplot, save_figure, write_results  # noqa: E402


def epoch_times(job, epoch, since):
    """Seconds from `since` to each member's first step of `epoch`, and its rejoin parts.
    A member's rendezvous waits for every other's shutdown: the slowest rejoin less the
    slowest shutdown is the rendezvous once the slowest member is there."""
    firsts = job.first_steps(epoch).values()
    done = [e["first_step"] - since for e in firsts]
    shutdown = max(e.get("shutdown_s", 0) for e in firsts)
    rejoin = max(e.get("joined_s", 0) for e in firsts)
    return {"members": len(firsts), "last_first_step_s": round(max(done), 3),
            "median_first_step_s": round(statistics.median(done), 3),
            "shutdown_s_max": round(shutdown, 3), "rejoin_s_max": round(rejoin, 3),
            "rendezvous_s": round(rejoin - shutdown, 3),
            "shutdowns_over_1s": sum(e.get("shutdown_s", 0) > 1 for e in firsts)}


def measure(workers, workdir):
    load_before = loadavg()
    job = ElasticScaleJob(workdir, workers, timeout=900)
    code = job.run()
    if code != 0 or job.added_at is None:
        raise RuntimeError(f"N={workers}: tfps-run exited {code}:\n{job.log()}")
    job.check_replay()
    n = workers
    killed = float((Path(workdir) / "killed").read_text())
    joined = job.first_steps(2)[f"w{n}"]["announced"]
    first0 = [e["first_step"] for e in job.first_steps(0).values()]
    loss = {"driver_saw_s": round(job.line_time(f"worker w{n - 1} (rank {n - 1}) was killed")
                                  - killed, 3),
            "epoch_published_s": round(job.line_time("elastic epoch 1:") - killed, 3),
            **epoch_times(job, 1, killed)}
    added = job.added_at
    addition = {"driver_started_s": round(job.line_time(f"started worker(s) w{n} ") - added, 3),
                "newcomer_joined_s": round(joined - added, 3),
                "epoch_published_s": round(job.line_time("elastic epoch 2:") - added, 3),
                **epoch_times(job, 2, added)}
    addition["from_join_s"] = round(addition["last_first_step_s"]
                                    - addition["newcomer_joined_s"], 3)
    return {"workers": n, "load_before": load_before, "load_after": loadavg(),
            "first_rendezvous_s": round(max(first0) - job.started, 2),
            "loss": loss, "addition": addition}


def table(rows):
    lines = ["| N | load | loss: driver saw it | epoch N-1 published | last survivor's first "
             "step (median) | slowest shutdown / rejoin (rendezvous) | addition: driver "
             "started the worker | newcomer joined | epoch N published | last member's first step "
             "(median) | from the join | slowest shutdown / rejoin (rendezvous) |",
             "|" + "---|" * 12]
    for r in rows:
        lo, ad = r["loss"], r["addition"]
        lines.append(
            f"| {r['workers']} | {r['load_before']:.1f} | {lo['driver_saw_s']} "
            f"| {lo['epoch_published_s']} | {lo['last_first_step_s']} "
            f"({lo['median_first_step_s']}) | {lo['shutdown_s_max']} / {lo['rejoin_s_max']} "
            f"({lo['rendezvous_s']}) "
            f"| {ad['driver_started_s']} | {ad['newcomer_joined_s']} "
            f"| {ad['epoch_published_s']} | {ad['last_first_step_s']} "
            f"({ad['median_first_step_s']}) | {ad['from_join_s']} "
            f"| {ad['shutdown_s_max']} / {ad['rejoin_s_max']} ({ad['rendezvous_s']}) |")
    return "\n".join(lines)


def plot(rows, path):
    plt = pyplot()
    if plt is None:
        return False
    n = [r["workers"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(n, [r["loss"]["last_first_step_s"] for r in rows], "o", label="loss: SIGKILL -> "
            "last survivor's first step")
    ax.plot(n, [r["addition"]["from_join_s"] for r in rows], "^", label="addition: join -> "
            "last member's first step")
    ax.plot(n, [r["first_rendezvous_s"] for r in rows], "s", label="first rendezvous")
    ax.set_ylabel("seconds (load-dependent)")
    save_figure(fig, [ax], path)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="16,32,64")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "scale_elastic"))
    args = parser.parse_args()
    rows = []
    for workers in map(int, args.workers.split(",")):
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix=f"scale-elastic{workers}-") as workdir:
                row = measure(workers, workdir)
            print(json.dumps(row), flush=True)
            rows.append(row)
    write(rows, args)


def write(rows, args):
    write_results(
        args.out, rows, table(rows),
        "# Elastic changes as N grows: core workers on one host\n\n"
        f"`python benchmarks/scale_elastic.py --workers {args.workers} --repeats "
        f"{args.repeats}`; load = 1-minute load average before the run (2 cores, shared). "
        "Seconds. Loss: from the SIGKILL of w<N-1> at step 3. Addition: from the hosts "
        "file getting a slot more (the discovery script runs about every second). Shutdown "
        "/ rejoin (rendezvous): the slowest member's engine shutdown, the slowest shutdown "
        "plus the next epoch's rendezvous, and their difference (the rendezvous once the "
        "slowest member is there). Every job's weights matched a NumPy replay bit for "
        "bit.", plot)


if __name__ == "__main__":
    main()

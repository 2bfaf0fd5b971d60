"""How long an elastic job (tfps-run --elastic, docs/elastic.md) takes to recover from each
kind of loss: from the driver's line naming the loss to every survivor's line saying it
re-initialised into the new epoch. Timestamps are taken here as each output line arrives
(the roles write unbuffered), so they include the pipes (well under a millisecond).

    python benchmarks/elastic_recovery.py [--repeats 3] [--out benchmarks/results/elastic_recovery]

Scenarios (the worker is tests/multiprocess/elastic_workers/loop_worker.py):
  worker_loss      3 workers, 2 servers, summation: w2 SIGKILLs itself at step 3
  server_loss      2 workers, 2 servers, summation: w0 SIGKILLs a server at step 3
  server_loss_ps   2 workers, 2 servers, PS mode: the same, plus the parameter push
  rendezvous_death 3 workers, 1 server: w2 dies while w0, w1 wait in epoch 0's rendezvous
                   (without the abandon they waited TFPS_TIMEOUT, 120 s by default)
Not asserted anywhere; the machine is shared, so compare within one run.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKER = REPO / "tests" / "multiprocess" / "elastic_workers" / "loop_worker.py"

SCENARIOS = {
    "worker_loss": (["-np", "3", "-ns", "2"], ["8", "2", "w2", "3"],
                    "worker w2 (rank 2) was killed", "averages now divide by 2", 2),
    "server_loss": (["-np", "2", "-ns", "2"], ["8", "2", "-", "-1", "--kill-server", "w0:3"],
                    "the job goes on with new servers", "epoch 1: rank", 2),
    "server_loss_ps": (["-np", "2", "-ns", "2"],
                       ["8", "2", "-", "-1", "--ps", "--kill-server", "w0:3"],
                       "the job goes on with new servers", "PS mode: pushed", 2),
    "rendezvous_death": (["-np", "3", "-ns", "1"],
                         ["6", "2", "-", "-1", "--die-in-rendezvous", "w2", "--workers", "3"],
                         "worker w2 (rank 2) was killed", "cluster complete", 1),
}


def run_once(name):
    flags, args, start_text, end_text, survivors = SCENARIOS[name]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TFPS_", "DMLC_"))}
    env.update({"PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2",
                "TFPS_HEARTBEAT_TIMEOUT": "5"})
    with tempfile.TemporaryDirectory(prefix="tfps-elastic-bench-") as out:
        command = [sys.executable, str(REPO / "tf_ps_ops" / "run.py"), *flags, "--elastic",
                   "--timeout", "150", sys.executable, str(WORKER), out, *args]
        began = time.monotonic()
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env)
        lines = [(time.monotonic() - began, line.rstrip("\n")) for line in proc.stdout]
        code = proc.wait()
    if code != 0:
        raise RuntimeError(f"{name}: tfps-run exited {code}:\n" +
                           "\n".join(text for _, text in lines[-40:]))
    start = next(t for t, text in lines if start_text in text)
    # rendezvous_death ends when the new epoch's scheduler says its cluster is complete:
    # the rendezvous the survivors no longer wait TFPS_TIMEOUT for.
    ends = [t for t, text in lines if t > start and end_text in text]
    if len(ends) < survivors:
        raise RuntimeError(f"{name}: {len(ends)} of {survivors} survivors recovered")
    return {"recovery_s": round(max(ends[:survivors]) - start, 4),
            "job_s": round(lines[-1][0], 2)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" /
                                             "elastic_recovery"))
    args = parser.parse_args()
    results = {}
    for name in SCENARIOS:
        runs = [run_once(name) for _ in range(args.repeats)]
        results[name] = {"runs": runs,
                         "median_recovery_s": statistics.median(r["recovery_s"] for r in runs)}
        print(f"{name}: recovery {[r['recovery_s'] for r in runs]} s, median "
              f"{results[name]['median_recovery_s']} s", flush=True)
    load = os.getloadavg()
    report = {"command": "python benchmarks/elastic_recovery.py " +
              " ".join(sys.argv[1:]), "loadavg_before_end": load, "results": results}
    Path(args.out + ".json").write_text(json.dumps(report, indent=1) + "\n")
    rows = "\n".join(
        f"| {name} | {r['median_recovery_s']:.3f} | "
        + ", ".join(f"{x['recovery_s']:.3f}" for x in r["runs"]) + " |"
        for name, r in results.items())
    Path(args.out + ".md").write_text(
        "# Elastic recovery time (benchmarks/elastic_recovery.py)\n\n"
        f"`{report['command']}` on the shared 2-core machine, load average "
        f"{load[0]:.1f}. Recovery: from the driver's line naming the loss to the last "
        "survivor's line saying it runs in the new epoch (worker_loss, server_loss: "
        "re-initialised; server_loss_ps: the parameters pushed to the new servers; "
        "rendezvous_death: the new epoch's scheduler says its cluster is complete).\n\n"
        "| scenario | median (s) | runs (s) |\n|---|---|---|\n" + rows + "\n")


if __name__ == "__main__":
    main()

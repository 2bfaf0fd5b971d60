"""Slow is not dead, on the real clock: the stall scenarios of tests/multiprocess/test_stall.py
with the default settings (TFPS_TIMEOUT 120 s, TFPS_STALL_WARNING 60 s) instead of a shortened
clock, launched the way a user launches (tfps-run, 2 workers, 1 server, loopback).

    python benchmarks/stall_real_clock.py [--sleep 150] [--out benchmarks/results/stall_real_clock.md]

Scenarios (the worker is tests/multiprocess/workers/stall_worker.py, a 2-worker Keras fit
whose rank 0 sleeps SLEEP s in a callback at the end of epoch 0 while rank 1 waits for its
gradients):
  defaults       nothing set: the job must complete, with stall warnings naming rank 0 in
                 every worker's log, and weights equal to the NumPy oracle's
  shutdown_30    TFPS_STALL_SHUTDOWN=30: the job must end with that message
  sigkill        no stall settings; rank 0 is SIGKILLed in its sleep while rank 1 waits for
                 it: rank 1's wait must fail at once (its "training failed" line), and the
                 job end (tfps-run's exit) follow
Each line's time is taken here as it arrives (the roles write unbuffered). Nothing is
asserted on timings: the script prints what it saw and writes a Markdown report.
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
WORKERS = REPO / "tests" / "multiprocess" / "workers"
WORKER = WORKERS / "stall_worker.py"
sys.path.insert(0, str(WORKERS))
from stall_worker import oracle  # noqa: E402


def launch(env_extra, sleep_s, out_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TFPS_", "DMLC_"))}
    env.update({"PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2",
                "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1", **env_extra})
    command = [sys.executable, str(REPO / "tf_ps_ops" / "run.py"), "-np", "2", "-ns", "1",
               sys.executable, str(WORKER), str(sleep_s), str(out_dir)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)


def read_lines(proc, began, lines, on_line=None):
    for line in proc.stdout:
        lines.append((time.monotonic() - began, line.rstrip("\n")))
        if on_line:
            on_line(line)


def worker_pids(launcher_pid):
    """The stall_worker.py processes under the launcher, by their TFPS_RANK."""
    pids = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            if not any(part.endswith(b"stall_worker.py") for part in cmdline):
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"TFPS_RANK="):
                pids[int(item.split(b"=", 1)[1])] = int(entry.name)
    return pids


def scenario(name, env_extra, sleep_s, kill_rank_0=False):
    with tempfile.TemporaryDirectory(prefix=f"tfps-stall-{name}-") as out:
        began = time.monotonic()
        proc = launch(env_extra, sleep_s, out)
        lines, killed_at = [], []

        def on_line(line):
            if kill_rank_0 and "sleeping" in line and not killed_at:
                def kill():
                    time.sleep(5.0)  # rank 1 is inside its wait for rank 0 by now
                    pid = worker_pids(proc.pid).get(0)
                    if pid:
                        killed_at.append(time.monotonic() - began)
                        os.kill(pid, signal.SIGKILL)
                threading.Thread(target=kill, daemon=True).start()

        reader = threading.Thread(target=read_lines, args=(proc, began, lines, on_line))
        reader.start()
        code = proc.wait(timeout=sleep_s + 400)
        ended = time.monotonic() - began
        reader.join(timeout=10)
        weights = {}
        for rank in range(2):
            path = Path(out) / f"rank{rank}.npz"
            if path.exists():
                with np.load(path) as saved:
                    weights[rank] = (saved["kernel"], saved["bias"])
    return dict(name=name, code=code, ended=ended, lines=lines, weights=weights,
                killed_at=killed_at[0] if killed_at else None)


def report(results, sleep_s):
    kernel, bias = oracle()
    out = ["# Stall handling on the real clock", "",
           f"`python benchmarks/stall_real_clock.py --sleep {sleep_s:g}`: 2 workers and 1 server "
           "on loopback through tfps-run, rank 0 sleeping "
           f"{sleep_s:g} s in a Keras callback between epochs (longer than the default "
           "TFPS_TIMEOUT of 120 s). Times are seconds since tfps-run started, taken as each "
           "line arrived. The machine is shared (2 cores).", ""]
    for result in results:
        out += [f"## {result['name']}", "",
                f"- tfps-run exit status {result['code']}, after {result['ended']:.1f} s"]
        if result["weights"]:
            for rank, (k, b) in sorted(result["weights"].items()):
                error = max(float(np.abs(k - kernel).max()), float(np.abs(b - bias).max()))
                out.append(f"- rank {rank}: trained; largest difference from the NumPy oracle "
                           f"{error:.2e}")
        if result["killed_at"] is not None:
            failed = [t for t, text in result["lines"] if "training failed" in text]
            out.append(f"- rank 0 SIGKILLed at {result['killed_at']:.2f} s in its sleep")
            if failed:
                out.append(f"- rank 1's wait failed {failed[0] - result['killed_at']:.2f} s "
                           "after the kill")
            out.append(f"- tfps-run exited {result['ended'] - result['killed_at']:.2f} s "
                       "after the kill")
        keep = [(t, text) for t, text in result["lines"]
                if any(word in text for word in ("stall warning", "sleeping", "trained", "STALL",
                                                 "killed", "failed", "ended", "exited"))
                and "cuInit" not in text]
        out += ["", "```"] + [f"{t:7.2f}  {text[:400]}" for t, text in keep[:40]] + ["```", ""]
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sleep", type=float, default=150.0)
    parser.add_argument("--only", choices=["defaults", "shutdown_30", "sigkill"], nargs="*")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" /
                                             "stall_real_clock.md"))
    args = parser.parse_args()
    plan = [("defaults", {}, False), ("shutdown_30", {"TFPS_STALL_SHUTDOWN": "30"}, False),
            ("sigkill", {}, True)]
    results = []
    for name, env_extra, kill in plan:
        if args.only and name not in args.only:
            continue
        print(f"running {name} ...", flush=True)
        results.append(scenario(name, env_extra, args.sleep, kill_rank_0=kill))
        print(f"{name}: exit {results[-1]['code']} after {results[-1]['ended']:.1f} s", flush=True)
    text = report(results, args.sleep)
    Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()

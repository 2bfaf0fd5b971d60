"""Steps each worker completes in a fixed time with one worker slowed 3x, under bsp,
ssp:1, ssp:3 and asp (docs/consistency.md).

    python3 benchmarks/consistency_bench.py            # ~6 min; writes results/consistency.{json,md}
    python3 benchmarks/consistency_bench.py --quick    # ~2 min, one repeat, shorter window

Each configuration is a fresh cluster on this host (3 workers, 1 server, loopback: the
slowdown is compute, not network) running tests/multiprocess/workers/consistency_worker.py:
every step a worker sleeps PACE seconds (3 x PACE on rank 2), then push_pulls two small
tensors. After a start barrier every worker records when each step ended; the table
counts the steps each finished within WINDOW seconds. Step counts, not wall times, are
compared, and all configurations run back to back in one invocation.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tfps_harness.launch_cluster import LoggedCluster  # noqa: E402

WORKER = ROOT / "tests" / "multiprocess" / "workers" / "consistency_worker.py"
PS_SERVER = ROOT / "tf_ps_ops" / "bin" / "ps_server"
CONFIGS = ["bsp", "ssp:1", "ssp:3", "asp"]
NUM_WORKERS, SLOW = 3, 2


def run_one(workdir, consistency, steps, pace):
    out = workdir / "out"
    out.mkdir(parents=True)
    cluster = LoggedCluster(PS_SERVER, workdir, NUM_WORKERS, 1, timeout=300, cwd=ROOT,
                            defaults={"TF_CPP_MIN_LOG_LEVEL": "2", "TFPS_BIND": "127.0.0.1"},
                            env={"TFPS_TEST_OUT": str(out), "TEST_CONSISTENCY": consistency,
                                 "TEST_STEPS": str(steps), "TEST_PACE": str(pace),
                                 "TEST_SLOW_RANK": str(SLOW), "TEST_SLOW_FACTOR": "3"})
    try:
        cluster.start([sys.executable, str(WORKER)])
        cluster.wait()
        failed = cluster.failures()
        if failed:
            raise RuntimeError("\n".join(r.describe() for r in failed))
    finally:
        cluster.close()
    return [np.load(out / f"rank{r}.npz")["ended"] for r in range(NUM_WORKERS)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--pace", type=float, default=0.05)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "consistency"))
    parser.add_argument("--workdir", default="/tmp/tfps_consistency_bench")
    args = parser.parse_args()
    window = 2.0 if args.quick else 4.0
    repeats = 1 if args.quick else 2
    # Enough steps that even asp's fast workers are still running when the window closes.
    steps = int(window / args.pace * 1.5) + 5
    rows = []
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for repeat in range(repeats):
        for consistency in CONFIGS:
            workdir = Path(args.workdir) / f"{stamp}-{repeat}-{consistency.replace(':', '')}"
            ended = run_one(workdir, consistency, steps, args.pace)
            counts = [int(np.sum(e <= window)) for e in ended]
            rows.append({"consistency": consistency, "repeat": repeat, "steps_in_window": counts})
            print(consistency, "repeat", repeat, "steps per rank in", window, "s:", counts,
                  flush=True)
    result = {"command": " ".join(["python3", "benchmarks/consistency_bench.py"] + sys.argv[1:]),
              "window_s": window, "pace_s": args.pace, "slow_rank": SLOW, "slow_factor": 3,
              "workers": NUM_WORKERS, "servers": 1, "steps_run": steps, "rows": rows}
    Path(args.out + ".json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [f"# Steps completed in {window:g} s, one worker (rank {SLOW}) 3x slower",
             "", f"`{result['command']}`: {NUM_WORKERS} workers, 1 server, one host; a step is "
             f"{args.pace:g} s of sleep (rank {SLOW}: {3 * args.pace:g} s) plus two push_pulls. "
             "Steps counted, not timed; all rows from one invocation.", "",
             "| consistency | repeat | rank 0 | rank 1 | rank 2 (slow) | fast / slow |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        c = row["steps_in_window"]
        ratio = (c[0] + c[1]) / 2 / max(c[SLOW], 1)
        lines.append(f"| {row['consistency']} | {row['repeat']} | {c[0]} | {c[1]} | {c[2]} | "
                     f"{ratio:.2f} |")
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

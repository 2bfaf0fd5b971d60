"""Regenerates every committed benchmark result (benchmarks/results/, RESULTS.md's
sources): the push_pull sweep, the fusion benchmark and the training comparison.

    python3 benchmarks/run_all.py        # or: make bench   (about 50 minutes, idle machine)
    python3 benchmarks/run_all.py --quick   # the same scripts in their quick modes (~4 min)

Each step prints its own progress; a failed step is reported and the rest still run.
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (name, argv, minutes expected on the 2-core reference machine)
FULL = [
    ("push_pull sweep", ["push_pull_bench.py"], 10),
    ("fusion", ["fusion_bench.py"], 2),
    ("training", ["train_bench.py"], 40),
]
QUICK = [
    ("push_pull sweep", ["push_pull_bench.py", "--quick"], 0.5),
    ("fusion", ["fusion_bench.py", "--repeats", "1", "--rates", "none",
                "--out", str(HERE / "results" / "fusion_quick")], 0.5),
    ("training", ["train_bench.py", "--quick"], 3),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    print("benchmarks: %s; expected about %.0f min in all" % (
        ", ".join(name for name, _, _ in plan), sum(m for _, _, m in plan)), flush=True)
    failed, t0 = [], time.monotonic()
    for name, argv, minutes in plan:
        print("\n=== %s (about %s min): python3 benchmarks/%s" % (
            name, minutes, " ".join(argv)), flush=True)
        start = time.monotonic()
        code = subprocess.call([sys.executable, str(HERE / argv[0]), *argv[1:]])
        print("=== %s: %s after %.1f min" % (name, "ok" if code == 0 else "FAILED (exit %d)"
                                           % code, (time.monotonic() - start) / 60), flush=True)
        if code != 0:
            failed.append(name)
    print("\nall benchmarks took %.1f min%s" % ((time.monotonic() - t0) / 60,
                                               "; failed: " + ", ".join(failed) if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Compares push_pull_bench.py results of two builds run interleaved (A1 B1 A2 B2 ...):
the median and the minimum over all sweeps of every run, per size, and B's relative to A's
(on a loaded machine the minimum is the steadier of the two).

    python3 benchmarks/compare_runs.py NAME_A NAME_B [RUNS]
reads benchmarks/results/{NAME}_{i}.json for i in 1..RUNS (default 3); a path prefix may be
given for results written by another checkout.
"""

import json
import statistics
import sys


def times(prefix, runs):
    out = {}
    for i in range(1, runs + 1):
        with open(f"{prefix}_{i}.json") as f:
            for row in json.load(f)["rows"]:
                out.setdefault((row["rate"], row["bytes"]), []).extend(row["time_s_runs"])
    return out


def main(a, b, runs=3):
    ta, tb = times(a, runs), times(b, runs)
    print("| link | bytes | A median ms | B median ms | B/A | A min ms | B min ms | B/A (min) "
          "| A busbw/link | B busbw/link |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(ta):
        ma, mb = statistics.median(ta[key]), statistics.median(tb[key])
        link = 1e9 if key[0] == "1gbit" else None
        eff = (lambda t: "%.0f%%" % (100 * key[1] * 8 / t / link)) if link else (lambda t: "")
        na, nb = min(ta[key]), min(tb[key])
        print(f"| {key[0]} | {key[1]} | {ma * 1e3:.2f} | {mb * 1e3:.2f} | {mb / ma:.3f} | "
              f"{na * 1e3:.2f} | {nb * 1e3:.2f} | {nb / na:.3f} | {eff(ma)} | {eff(mb)} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(v) for v in sys.argv[3:4]))

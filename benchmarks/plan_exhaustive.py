"""The plan against every hand-picked configuration, in the cost model: for a 4-layer
model (a conv layer, three Dense layers) on four clusters, every combination of per-layer
choices (sum with none/fp16/int8, SFB) × partition size × fusion × credit. Prints the
plan's predicted step over the best one's (1.0 = the plan is the best), both choices and
the best settings. ~1 min per cluster here.

    python3 benchmarks/plan_exhaustive.py
"""

import itertools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tf_ps_ops.plan import cost, layers, planner  # noqa: E402

MODEL = [layers.conv("conv", 3, 3, 64, 128, 56, 56), layers.dense("fc1", 9216, 4096),
         layers.dense("fc2", 4096, 4096), layers.dense("out", 4096, 1000)]
CODECS = ("none", "fp16", "int8")
CASES = [("8 workers, 10 Gbit/s, CPU rebuild", cost.Cluster(8, bandwidth=1.25e9),
          cost.Machine()),
         ("16 workers (4 per host), 24 Gbit/s, GPU-speed rebuild",
          cost.Cluster(16, 4, bandwidth=3e9), cost.Machine(rebuild_rate=1e12)),
         ("4 workers, 1 Gbit/s, CPU rebuild", cost.Cluster(4, bandwidth=0.125e9),
          cost.Machine()),
         ("64 workers (8 per host), 100 Gbit/s, 1 ms latency, GPU-speed rebuild",
          cost.Cluster(64, 8, bandwidth=12.5e9, latency=1e-3),
          cost.Machine(rebuild_rate=1e12))]


def main():
    settings = [cost.Settings(p, f, c) for p in planner.PARTITIONS for f in planner.FUSIONS
                for c in planner.CREDITS]
    candidates = [planner._candidates(layer, CODECS, (cost.SUM, cost.SFB)) for layer in MODEL]
    print("| cluster | plan / best | plan's choices | best choices | best settings |")
    print("|---|---|---|---|---|")
    for name, cluster, machine in CASES:
        plan = planner.make_plan(MODEL, cluster, 32, machine, CODECS)
        best = min(((cost.step_time(MODEL, choices, cluster, machine, 32, s)[0], choices, s)
                    for s in settings for choices in itertools.product(*candidates)),
                   key=lambda row: row[0])
        print(f"| {name} | {plan.step_time / best[0]:.3f} | "
              f"{', '.join(map(str, plan.choices))} | {', '.join(map(str, best[1]))} | "
              f"{best[2].partition_bytes}/{best[2].fusion_bytes}/{best[2].credit} |")


if __name__ == "__main__":
    main()

"""The plan against every hand-picked configuration, in the cost model: for a 4-layer
model (a conv layer, three Dense layers) on four clusters, every combination of per-layer
choices (sum with none/fp16/int8, SFB) × partition size × fusion × credit. Prints the
plan's predicted step over the best one's (1.0 = the plan is the best), both choices and
the best settings. ~1 min per cluster here.

    python3 benchmarks/plan_exhaustive.py
    python3 benchmarks/plan_exhaustive.py --zoo bert [--hosts 2] [--gbits 1] [--batch 4]
        [--codecs none,fp16,int8]

--zoo takes a model of benchmarks/zoo_models.py (built in Keras, its embeddings left out:
their gradients travel as gathers of the touched rows, outside the plan, as under
DistributedOptimizer(plan="auto")) on hosts of one worker and one server each. Its layers
are too many for every combination: the hand-picked configurations are one choice for all
layers (sum, sum+fp16, sum+int8, or SFB where it applies) with every combination of
choices for the 3 largest layers, × every partition size, fusion and credit.
"""

import argparse
import itertools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tf_ps_ops.plan import cost, layers, planner, steptime  # noqa: E402

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


TOP = 3


def zoo(name, hosts, gbits, batch, codecs):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import zoo_models

    model = [layer for layer in layers.from_keras(zoo_models.build(name))
             if layer.kind != "embedding"]
    cluster = cost.Cluster(hosts, bandwidth=gbits * 1.25e8)
    machine = cost.Machine()
    settings = [steptime.Settings(p, f, c) for p in planner.PARTITIONS for f in planner.FUSIONS
                for c in planner.CREDITS]
    candidates = [planner._candidates(layer, codecs, (cost.SUM, cost.SFB)) for layer in model]
    top = sorted(range(len(model)), key=lambda i: -model[i].bytes)[:TOP]
    plan = planner.make_plan(model, cluster, batch, machine, codecs)
    best = None
    for rest in (cost.Choice(), cost.Choice(cost.SUM, "fp16"), cost.Choice(cost.SUM, "int8"),
                 cost.Choice(cost.SFB)):
        if not any(rest in c for c in candidates):
            continue
        base = [rest if rest in c else cost.Choice() for c in candidates]
        for picks in itertools.product(*(candidates[i] for i in top)):
            choices = list(base)
            for index, pick in zip(top, picks):
                choices[index] = pick
            for s in settings:
                t = steptime.step_time(model, choices, cluster, machine, batch, s)[0]
                if best is None or t < best[0]:
                    best = (t, tuple(choices), s)
    counts = lambda choices: ", ".join(f"{n}× {c}" for c, n in sorted(
        {str(c): sum(str(x) == str(c) for x in choices) for c in choices}.items()))
    print(f"{name}: {len(model)} layers (embeddings left out), {hosts} hosts at {gbits} "
          f"Gbit/s, batch {batch}, codecs {', '.join(codecs)}, cost.Machine() defaults")
    print("| plan (ms) | best (ms) | plan / best | default (ms) | plan's choices | best's "
          "choices | plan's settings | best settings |")
    print("|---|---|---|---|---|---|---|---|")
    ps, bs = plan.settings, best[2]
    print(f"| {plan.step_time * 1e3:.2f} | {best[0] * 1e3:.2f} | "
          f"{plan.step_time / best[0]:.3f} | {plan.default_step_time * 1e3:.2f} | "
          f"{counts(plan.choices)} | {counts(best[1])} | "
          f"{ps.partition_bytes}/{ps.fusion_bytes}/{ps.credit} | "
          f"{bs.partition_bytes}/{bs.fusion_bytes}/{bs.credit} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", default=None, help="a zoo model: resnet50, mobilenetv2, "
                        "bert, dlrm")
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--gbits", type=float, default=1.0)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--codecs", default=",".join(CODECS),
                        help="the codecs the plan and the hand-picked ones may use")
    args = parser.parse_args()
    if args.zoo:
        return zoo(args.zoo, args.hosts, args.gbits, args.batch, tuple(args.codecs.split(",")))
    settings = [steptime.Settings(p, f, c) for p in planner.PARTITIONS for f in planner.FUSIONS
                for c in planner.CREDITS]
    candidates = [planner._candidates(layer, CODECS, (cost.SUM, cost.SFB)) for layer in MODEL]
    print("| cluster | plan / best | plan's choices | best choices | best settings |")
    print("|---|---|---|---|---|")
    for name, cluster, machine in CASES:
        plan = planner.make_plan(MODEL, cluster, 32, machine, CODECS)
        best = min(((steptime.step_time(MODEL, choices, cluster, machine, 32, s)[0], choices, s)
                    for s in settings for choices in itertools.product(*candidates)),
                   key=lambda row: row[0])
        print(f"| {name} | {plan.step_time / best[0]:.3f} | "
              f"{', '.join(map(str, plan.choices))} | {', '.join(map(str, best[1]))} | "
              f"{best[2].partition_bytes}/{best[2].fusion_bytes}/{best[2].credit} |")


if __name__ == "__main__":
    main()

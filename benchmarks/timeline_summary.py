"""Summarises TFPS_TIMELINE traces: per tensor, the mean duration of each stage and when,
within a step, it was ready and done.

    python3 benchmarks/timeline_summary.py trace-0.json [trace-1.json ...] [--skip 3]

Stages (tf_ps_ops/cc/engine/timeline.h): queued, scheduled, push, server, pull (or
push_pull when the replies carried no server stamps), a peer collective's allgather,
alltoall or neighbour exchange (until its latest peer's part arrived), written. --skip
drops each tensor's first calls (warm-up). Prints a Markdown table per file.
"""

import argparse
import json
import statistics
from collections import defaultdict

STAGES = ("queued", "scheduled", "push", "server", "pull", "push_pull", "allgather",
          "alltoall", "neighbour exchange", "written")


def summarise(path, skip):
    trace = json.loads(open(path).read())
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    calls = defaultdict(lambda: defaultdict(list))  # tensor -> stage -> [(ts, dur)]
    sizes = {}
    for e in sorted(events, key=lambda e: e["ts"]):
        tensor = e["args"]["tensor"]
        calls[tensor][e["name"]].append((e["ts"], e["dur"]))
        sizes[tensor] = e["args"].get("bytes", 0)
    lines = ["## %s" % path, "",
             "Times in ms; *ready* and *done*: when the tensor was handed to the engine and "
             "when its kernel completed, after the first tensor of the same step was handed "
             "over (with wait-free backprop, layers near the output are ready and often "
             "done before the rest of backward has produced the other gradients).", "",
             "| tensor | bytes | calls | ready | done | " + " | ".join(STAGES) + " |",
             "|---|---|---|---|---|" + "---|" * len(STAGES)]
    # Tensors in order of their first communication: with wait-free backprop the layers
    # nearest the output come first.
    order = sorted(calls, key=lambda t: calls[t]["queued"][0][0] if calls[t]["queued"] else 0)
    # Tensors called once per step (the most calls; a one-off broadcast has fewer): the
    # i-th call of each belongs to step i, whose origin is the earliest of them.
    steps = max((len(calls[t]["queued"]) for t in order), default=0)
    per_step = [t for t in order if len(calls[t]["queued"]) == steps]
    origin = [min(calls[t]["queued"][i][0] for t in per_step) for i in range(steps)]
    for tensor in order:
        stages = calls[tensor]
        n = len(stages["queued"] or stages["written"]) - skip
        if n <= 0:
            continue
        cells = []
        for stage in STAGES:
            durs = [d for _, d in stages[stage][skip:]]
            cells.append("%.2f" % (statistics.mean(durs) / 1e3) if durs else "")
        ready, done = [], []
        for i in range(skip, min(steps, len(stages["written"])) if tensor in per_step else 0):
            ready.append((stages["queued"][i][0] - origin[i]) / 1e3)
            done.append((sum(stages["written"][i]) - origin[i]) / 1e3)
        lines.append("| %s | %d | %d | %s | %s | %s |" % (
            tensor, sizes[tensor], n, "%.1f" % statistics.mean(ready) if ready else "",
            "%.1f" % statistics.mean(done) if done else "", " | ".join(cells)))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--skip", type=int, default=0, help="first calls per tensor to drop")
    args = parser.parse_args()
    for path in args.traces:
        print(summarise(path, args.skip))
        print()


if __name__ == "__main__":
    main()

"""How far apart the workers run, step by step, from their TFPS_TIMELINE traces.

    python3 benchmarks/timeline_skew.py /tmp/tl/trace-0.json /tmp/tl/trace-1.json ... \\
        [--prefix DistributedSGD.hybrid/ --prefix sfb.hybrid/] [--skip 20]

Emulated hosts share one machine's clock, so the traces line up. For the tensors whose
names start with a --prefix (one arm of benchmarks/interleaved.py, say: its summed
gradients' and its SFB factors'), the i-th call of every tensor belongs to step i. A
tensor's call starts at its first stage (push_pull's "queued", a peer collective's
exchange) and ends with its "written". Per worker it prints the median *span* (its first tensor
handed to the engine to its last one written back) and *gap* (that last write to the next
step's first hand-over: the update, the next forward and backward up to the first
gradient, and whatever else the step runs that is not a push_pull, such as SFB's
exchange and rebuild). Across the workers, the spread (latest less earliest) of the first
hand-over and of the last write in each step: a synchronous step waits for its latest
worker, so the spread is time the others wait in their servers' "server" stage.
"""

import argparse
import collections
import json
import statistics


FIRST_STAGES = ("queued", "allgather", "alltoall", "neighbour exchange")


def calls(path, prefixes):
    """{tensor: ([starts], [written ends])} of the tensors named prefix* for a prefix."""
    trace = json.loads(open(path).read())
    stages = collections.defaultdict(list)
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e["args"]["tensor"].startswith(tuple(prefixes)):
            if e["name"] in FIRST_STAGES:
                stages[(e["args"]["tensor"], 0)].append(e["ts"])
            elif e["name"] == "written":
                stages[(e["args"]["tensor"], 1)].append(e["ts"] + e["dur"])
    tensors = sorted({t for t, _ in stages})
    return {t: (sorted(stages[(t, 0)]), sorted(stages[(t, 1)])) for t in tensors}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", help="one TFPS_TIMELINE file per worker")
    parser.add_argument("--prefix", action="append", default=None,
                        help="tensor names' start (repeatable; default DistributedSGD.)")
    parser.add_argument("--skip", type=int, default=20, help="warm-up calls to drop")
    args = parser.parse_args()
    prefixes = args.prefix or ["DistributedSGD."]
    first, last = [], []
    for path in args.traces:
        by_tensor = calls(path, prefixes)
        if not by_tensor:
            raise SystemExit(f"{path}: no tensor named {' or '.join(prefixes)}*")
        steps = min(min(len(q), len(w)) for q, w in by_tensor.values())
        first.append([min(q[i] for q, _ in by_tensor.values()) for i in range(steps)])
        last.append([max(w[i] for _, w in by_tensor.values()) for i in range(steps)])
    steps = min(len(f) for f in first)
    if steps <= args.skip + 1:
        raise SystemExit(f"only {steps} steps in the traces: fewer than --skip {args.skip}")
    window = range(args.skip, steps - 1)
    print(f"{len(args.traces)} workers, {len(window)} steps of {', '.join(prefixes)}* "
          f"(ms, medians)")
    for rank, (f, w) in enumerate(zip(first, last)):
        span = statistics.median(w[i] - f[i] for i in window) / 1e3
        gap = statistics.median(f[i + 1] - w[i] for i in window) / 1e3
        print(f"worker {rank}: span {span:.2f}, gap {gap:.2f}, step {span + gap:.2f}")
    for name, times in (("first hand-over", first), ("last write", last)):
        spread = [max(t[i] for t in times) - min(t[i] for t in times) for i in window]
        print(f"spread of the {name} across workers: median {statistics.median(spread) / 1e3:.2f}, "
              f"mean {statistics.mean(spread) / 1e3:.2f}")


if __name__ == "__main__":
    main()

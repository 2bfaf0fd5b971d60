"""Push_pulls chained or overlapped, with and without a cycle time: what a tiny tensor
costs a worker when its collectives run one after another and when they overlap, and how
many messages it takes. Run under tfps-run:

    tfps-run --insecure -np 2 -ns 2 python3 benchmarks/chained_tensors.py
    tfps-run --insecure -np 2 -ns 2 python3 benchmarks/chained_tensors.py --cycles 0,200,1000

Each shape is one tf.function of --tensors push_pulls of one float, its answers summed in
the graph: `chained` passes no variable's handle, so tf.function's automatic control
dependencies run the push_pulls in program order, each its own round trip (as the cost
model's tiny-tensor probe, tf_ps_ops.plan.tensor_probe, and tensor_cpu.py do);
`overlapped` passes each tensor's variable, as DistributedOptimizer passes a gradient's,
so they are in flight together. Per shape and cycle time (TFPS_CYCLE_US, set with
autotune.set_cycle), rank 0's medians over --rounds of --repeats calls: CPU and wall time
per call, and messages and partitions sent to the servers per call (a fusion batch is
one message). Writes results/chained_tensors.json and .md on rank 0.
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def shapes(tf, ops, tensors):
    """{name: tf.function} of the two shapes; `chained` is the probe's own
    (tensor_probe.chain)."""
    from tf_ps_ops.plan import tensor_probe

    variables = [tf.Variable(np.ones(1, np.float32)) for _ in range(tensors)]

    def overlapped():
        return tf.add_n([ops.allreduce(tf.identity(v), name=f"overlapped.{i}",
                                       _variable=v)[:1] for i, v in enumerate(variables)])

    return {"chained": tensor_probe.chain(ops, tf, variables, "chained"),
            "overlapped": tf.function(overlapped)}


def counters(lib):
    return lib.tfps_messages_sent(), lib.tfps_parts_sent()


def measure(function, repeats, lib):
    """(CPU s, wall s, messages, partitions) per call over `repeats` calls."""
    function().numpy()
    (m0, p0), cpu, wall = counters(lib), time.process_time(), time.perf_counter()
    for _ in range(repeats):
        function().numpy()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    m1, p1 = counters(lib)
    return cpu / repeats, wall / repeats, (m1 - m0) / repeats, (p1 - p0) / repeats


def table(rows, tensors):
    lines = [f"{tensors} push_pulls of one float per call; rank 0's medians per call.", "",
             "| shape | cycle µs | CPU ms | wall ms | messages | partitions |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['cycle_us']} | {r['cpu_s'] * 1e3:.2f} | "
                     f"{r['wall_s'] * 1e3:.2f} | {r['messages']:.1f} | {r['parts']:.1f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=32)
    parser.add_argument("--cycles", default="0,200", help="TFPS_CYCLE_US values, µs")
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cycles = [int(c) for c in args.cycles.split(",")]

    import tensorflow as tf
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    import tf_ps_ops.tensorflow as tfps
    from tf_ps_ops.collectives import ops
    from tf_ps_ops.common import basics, library
    from tf_ps_ops.plan import autotune

    tfps.init()
    lib = library.c_api()
    functions = shapes(tf, ops, args.tensors)
    runs = {(s, c): [] for s in functions for c in cycles}
    for _ in range(args.rounds):  # alternating, so that drift touches each alike
        for (shape, cycle), out in runs.items():
            autotune.set_cycle(cycle)
            out.append(measure(functions[shape], args.repeats, lib))
    rows = [dict(shape=s, cycle_us=c, **{k: float(np.median([m[i] for m in measured]))
                                         for i, k in enumerate(("cpu_s", "wall_s", "messages",
                                                                "parts"))})
            for (s, c), measured in runs.items()]
    if tfps.rank() == 0:
        text = table(rows, args.tensors)
        print(text, flush=True)
        RESULTS.mkdir(exist_ok=True)
        meta = dict(tensors=args.tensors, workers=tfps.size(), servers=basics.num_servers(),
                    repeats=args.repeats, rounds=args.rounds)
        (RESULTS / "chained_tensors.json").write_text(json.dumps(dict(meta=meta, rows=rows),
                                                                 indent=1) + "\n")
        command = ("tfps-run --insecure -np %d -ns %d python3 benchmarks/chained_tensors.py "
                   "--cycles %s" % (tfps.size(), basics.num_servers(), args.cycles))
        (RESULTS / "chained_tensors.md").write_text(
            "# Chained and overlapped push_pulls (benchmarks/chained_tensors.py)\n\n"
            "`%s`, loopback\n\n%s\n" % (command, text))
    tfps.shutdown()


if __name__ == "__main__":
    main()

"""What a dense variable costs in PS mode beyond what it costs in summation: PS mode's
optimizer (tf_ps_ops.optimizers) pushes each variable's gradient and pulls its new value
on its own, with the servers running the update, where DistributedOptimizer's summation
fuses small gradients into one buffer and updates on the worker. Sets of 8 to N small
variables (the same bytes each) are trained in both modes, SGD with momentum 0.9, so what
grows with the count in one mode and not the other is per variable: the worker's CPU,
the servers' CPU (every ps_server the job started on this machine) and the step.

    tfps-run -np 2 -ns 2 .venv/bin/python benchmarks/ps_dense_variables.py \\
        [--variables 8,64,256] [--elements 4096] [--steps 200] [--repeats 3] \\
        [--out benchmarks/results/ps_dense_variables.md]

Rank 0 writes a Markdown table (per mode and count: median step, worker CPU and the
servers' CPU per step) and the least-squares slopes per variable of each mode, whose
difference (PS mode less summation) the cost model's Machine.ps_variable_cpu and
server_ps_variable_cpu defaults come from.
"""

import argparse
import os
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from ps_sparse_partitions import measure, slope, start_worker  # noqa: E402

MODES = ("sum", "ps")


def build(mode, count, args):
    """A training step (a tf.function, warmed up) of `count` variables of args.elements
    floats each, loss Σ v², with `mode`'s optimizer."""
    import keras
    import numpy as np
    import tensorflow as tf

    import tf_ps_ops
    import tf_ps_ops.optimizers

    rng = np.random.default_rng(count)
    variables = [keras.Variable(rng.normal(size=args.elements).astype(np.float32),
                                name=f"probe_{mode}_{count}_{i}") for i in range(count)]
    if mode == "ps":
        optimizer = tf_ps_ops.optimizers.SGD(1e-3, momentum=0.9)
    else:
        optimizer = tf_ps_ops.DistributedOptimizer(keras.optimizers.SGD(1e-3, momentum=0.9))
    optimizer.build(variables)  # PS mode: every worker adopts rank 0's values

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(v * v) for v in variables])
        optimizer.apply(tape.gradient(loss, variables), variables)
        return loss

    for _ in range(5):
        step().numpy()
    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variables", default="8,64,256",
                        help="variable counts (comma-separated)")
    parser.add_argument("--elements", type=int, default=4096, help="floats per variable")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(HERE / "results" / "ps_dense_variables.md"))
    args = parser.parse_args()
    counts = [int(c) for c in args.variables.split(",")]
    if len(counts) < 2 or min(counts) < 1:
        parser.error("--variables: two or more positive counts, comma-separated")

    import numpy as np
    import tensorflow as tf

    rank, size, servers = start_worker()
    steps = {(mode, count): build(mode, count, args) for mode in MODES for count in counts}
    runs = {key: [] for key in steps}
    for repeat in range(args.repeats):  # interleaved, so slow drift cancels
        for key, step in steps.items():
            runs[key].append(measure(step, args.steps, servers))
            if rank == 0:
                seconds, worker, server = runs[key][-1]
                print(f"repeat {repeat + 1}, {key[0]}, {key[1]} variables: step "
                      f"{seconds * 1e3:.2f} ms, worker CPU {worker * 1e3:.2f} ms, servers' "
                      f"CPU {server * 1e3:.2f} ms per step", flush=True)
    if rank != 0:
        return
    rows = {key: tuple(float(np.median(column)) for column in zip(*runs[key]))
            for key in steps}
    slopes = {mode: [slope(counts, [rows[(mode, c)][i] for c in counts]) for i in range(3)]
              for mode in MODES}
    # The servers' extra CPU per variable and per worker that pushes it.
    extra = [p - s for p, s in zip(slopes["ps"], slopes["sum"])]
    from tf_ps_ops.common import basics

    command = " ".join([f"tfps-run -np {size} -ns {basics.num_servers()}", ".venv/bin/python",
                        "benchmarks/ps_dense_variables.py"] + sys.argv[1:])
    lines = [f"# A dense variable in PS mode against summation ({size} workers, "
             f"{basics.num_servers()} servers, one machine)", "",
             f"`{command}` on {platform.node() or 'this machine'} ({os.cpu_count()} cores, "
             f"one TF thread per worker), TF {tf.__version__}; variables of {args.elements} "
             f"floats, SGD with momentum 0.9 (PS mode: tf_ps_ops.optimizers.SGD, the "
             f"servers update; summation: DistributedOptimizer, the worker updates); per "
             f"mode and count the median over {args.repeats} repeats (all interleaved) of "
             f"the median step and the mean CPU over {args.steps} steps.", "",
             "| mode | variables | step ms | worker CPU ms/step | servers' CPU ms/step |",
             "|---|---|---|---|---|"]
    lines += [f"| {mode} | {count} | {s * 1e3:.2f} | {w * 1e3:.2f} | {c * 1e3:.2f} |"
              for (mode, count), (s, w, c) in rows.items()]
    lines += ["", "servers' CPU: every ps_server process of the job (its servers and its "
                  "scheduler), from /proc.", ""]
    lines += [f"Per variable (least-squares slope), {mode}: step {s * 1e6:.1f} µs, a "
              f"worker's CPU {w * 1e6:.1f} µs, the servers' CPU {c * 1e6:.1f} µs "
              f"({c / size * 1e6:.1f} µs per worker that pushes it)."
              for mode, (s, w, c) in slopes.items()]
    lines += ["", f"PS mode less summation, per variable: step {extra[0] * 1e6:.1f} µs, a "
                  f"worker's CPU {extra[1] * 1e6:.1f} µs, the servers' CPU "
                  f"{extra[2] / size * 1e6:.1f} µs per worker that pushes it."]
    print("\n".join(lines[-4:]))
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()

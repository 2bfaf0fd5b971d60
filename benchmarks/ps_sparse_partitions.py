"""What an untouched partition of an embedding table costs in PS mode: each partition of
the table gets a push per worker and step, with no rows if the step touched none, and a
reply with the rows any worker touched. Tables of 1 to N partitions (TFPS_PARTITION_BYTES
each) are trained with the same rows touched every step (all in the first partition), so
whatever grows with the table is the untouched partitions' messages: the worker's CPU,
the servers' CPU (every ps_server the job started on this machine) and the step.

    tfps-run -np 2 -ns 2 .venv/bin/python benchmarks/ps_sparse_partitions.py \\
        [--partitions 1,64,256,512] [--dim 64] [--rows-touched 64] [--steps 300] [--repeats 3] \\
        [--out benchmarks/results/ps_sparse_partitions.md]

Rank 0 writes a Markdown table (per table size: median step, worker CPU and the
servers' CPU per step) and the least-squares slopes per untouched partition, which the
cost model's Machine.partition_cpu and server_partition_cpu defaults come from.
"""

import argparse
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from embedding_lookup import table_step  # noqa: E402
from tf_ps_ops.common import config  # noqa: E402
from train_measure import _pid_cpu  # noqa: E402


def server_pids():
    """The ps_server processes started by the launcher that started this worker."""
    parent, found = os.getppid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        ppid = int(text[text.rindex(")") + 2:].split()[1])
        if name == "ps_server" and ppid == parent:
            found.append(int(entry))
    return found


def start_worker():
    """One TensorFlow thread each way, tf_ps_ops started: (rank, size, the ps_server
    processes whose CPU rank 0 reads)."""
    import tensorflow as tf

    import tf_ps_ops

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf_ps_ops.init()
    rank = tf_ps_ops.rank()
    return rank, tf_ps_ops.size(), server_pids() if rank == 0 else []


def build(partitions, args):
    """A training step (a tf.function, warmed up) of a table of `partitions` partitions
    that updates the same args.rows_touched rows every step."""
    import numpy as np
    import tensorflow as tf

    from tf_ps_ops import optimizers
    from tf_ps_ops.training.embedding import Embedding

    rows = partitions * (args.partition_bytes // (4 * args.dim))
    ids = tf.constant(np.arange(args.rows_touched, dtype=np.int32)[None, :])
    step = table_step(Embedding(rows, args.dim, name=f"probe_table_{partitions}"),
                      optimizers.SGD(0.01), ids)
    for _ in range(5):
        step().numpy()
    return step


def measure(step, steps, servers):
    """(median step seconds, worker CPU-seconds per step, servers' CPU-seconds per step)
    over `steps` steps."""
    import numpy as np

    times = []
    start_cpu = time.process_time()
    start_servers = [_pid_cpu(pid) for pid in servers]
    for _ in range(steps):
        start = time.perf_counter()
        step().numpy()
        times.append(time.perf_counter() - start)
    worker = (time.process_time() - start_cpu) / steps
    ends = [_pid_cpu(pid) for pid in servers]
    server = sum((b or 0) - (a or 0) for a, b in zip(start_servers, ends)) / steps
    return float(np.median(times)), worker, server


def slope(xs, ys):
    import numpy as np

    return float(np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="1,64,256,512",
                        help="table sizes, in partitions (comma-separated)")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--rows-touched", type=int, default=64)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(HERE / "results" / "ps_sparse_partitions.md"))
    args = parser.parse_args()
    args.partition_bytes = config.engine_int("TFPS_PARTITION_BYTES")  # as the engine reads it
    sizes = [int(p) for p in args.partitions.split(",")]
    if not sizes or min(sizes) < 1:
        parser.error("--partitions: positive partition counts, comma-separated")

    import numpy as np
    import tensorflow as tf

    rank, size, servers = start_worker()
    steps = {partitions: build(partitions, args) for partitions in sizes}
    runs = {partitions: [] for partitions in sizes}
    for repeat in range(args.repeats):  # the sizes interleaved, so slow drift cancels
        for partitions in sizes:
            runs[partitions].append(measure(steps[partitions], args.steps, servers))
            if rank == 0:
                step, worker, server = runs[partitions][-1]
                print(f"repeat {repeat + 1}, {partitions} partitions: step {step * 1e3:.2f} "
                      f"ms, worker CPU {worker * 1e3:.2f} ms, servers' CPU "
                      f"{server * 1e3:.2f} ms per step", flush=True)
    rows = [(partitions,) + tuple(float(np.median(column)) for column in zip(*runs[partitions]))
            for partitions in sizes]
    if rank != 0:
        return
    counts = [r[0] for r in rows]
    step_slope = slope(counts, [r[1] for r in rows])
    worker_slope = slope(counts, [r[2] for r in rows])
    # Every worker pushes every partition: the servers' CPU per partition and worker.
    server_slope = slope(counts, [r[3] for r in rows]) / size
    from tf_ps_ops.common import basics

    command = " ".join([f"tfps-run -np {size} -ns {basics.num_servers()}", ".venv/bin/python",
                        "benchmarks/ps_sparse_partitions.py"] + sys.argv[1:])
    lines = [f"# An untouched partition of an embedding table in PS mode ({size} workers, "
             f"{basics.num_servers()} servers, one machine)", "",
             f"`{command}` on {platform.node() or 'this machine'} ({os.cpu_count()} cores, "
             f"one TF thread per worker), TF {tf.__version__}; tables of {args.dim}-float "
             f"rows cut into {args.partition_bytes:,}-byte partitions, the same "
             f"{args.rows_touched} rows (all in the first partition) updated by plain SGD "
             f"every step; per size the median over {args.repeats} repeats (the sizes "
             f"interleaved) of the median step and the mean CPU over {args.steps} steps.",
             "",
             "| partitions | step ms | worker CPU ms/step | servers' CPU ms/step |",
             "|---|---|---|---|"]
    lines += [f"| {p} | {s * 1e3:.2f} | {w * 1e3:.2f} | {c * 1e3:.2f} |"
              for p, s, w, c in rows]
    lines += ["", "servers' CPU: every ps_server process of the job (its servers and its "
                  "scheduler), from /proc."]
    lines += ["", f"Per untouched partition (least-squares slope): step "
                  f"{step_slope * 1e6:.1f} µs, a worker's CPU {worker_slope * 1e6:.1f} µs, "
                  f"the servers' CPU {server_slope * 1e6:.1f} µs per worker that pushes it."]
    print("\n".join(lines[-1:]))
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()

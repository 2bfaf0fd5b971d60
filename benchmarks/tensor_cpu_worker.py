"""One worker of benchmarks/tensor_cpu.py: times this process's CPU, in total and per
thread, for push_pulls of four shapes, each one `tf.function` whose answers stay in the
graph (as a training step's do):

- lone: one tensor of one float;
- tiny: --tensors tensors of one float;
- many: --tensors tensors of --kb KiB each;
- one: one tensor of --tensors × --kb KiB (the same bytes as `many`).

Prints one TENSOR_CPU_RESULT line (JSON): per shape, the median over --rounds of the
per-call means over --repeats calls of CPU seconds, wall seconds and {thread name: CPU
seconds} (the main thread is "main"; the engine's thread keeps Python's name).
"""

import argparse
import collections
import json
import os
import time

import numpy as np

from io_threads import stat_cpu_s  # this file's folder is on sys.path

SHAPES = ("lone", "tiny", "many", "one")


def thread_cpu():
    """{thread name: CPU seconds} of this process, from /proc/self/task."""
    out = collections.Counter()
    for tid in os.listdir("/proc/self/task"):
        try:
            name, cpu = stat_cpu_s(f"/proc/self/task/{tid}/stat")
        except OSError:  # the thread ended
            continue
        out["main" if int(tid) == os.getpid() else name] += cpu
    return out


def functions(tf, ops, tensors, kb):
    """{shape: tf.function} of the four shapes, each the cost model's probe's
    (tensor_probe.chain)."""
    from tf_ps_ops.plan.tensor_probe import chain

    floats = kb * 256
    tiny = [tf.constant(np.ones(1, np.float32)) for _ in range(tensors)]
    many = [tf.constant(np.ones(floats, np.float32)) for _ in range(tensors)]
    one = tf.constant(np.ones(tensors * floats, np.float32))
    return {"lone": chain(ops, tf, tiny[:1], "tensor_cpu.lone"),
            "tiny": chain(ops, tf, tiny, "tensor_cpu.tiny"),
            "many": chain(ops, tf, many, "tensor_cpu.many"),
            "one": chain(ops, tf, [one], "tensor_cpu.one")}


def measure(function, repeats):
    """(CPU s, wall s, {thread: CPU s}) per call, means over `repeats` calls."""
    function().numpy()
    threads, cpu, wall = thread_cpu(), time.process_time(), time.perf_counter()
    for _ in range(repeats):
        function().numpy()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    after = thread_cpu()
    return cpu / repeats, wall / repeats, {name: (after[name] - threads.get(name, 0.0)) /
                                           repeats for name in after}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensors", type=int, default=32)
    parser.add_argument("--kb", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import tensorflow as tf
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    import tf_ps_ops.tensorflow as tfps
    from tf_ps_ops.collectives import ops
    from tf_ps_ops.common import basics

    tfps.init()
    fns = functions(tf, ops, args.tensors, args.kb)
    runs = {shape: [] for shape in SHAPES}
    for _ in range(args.rounds):  # the shapes alternate, so drift touches each alike
        for shape in SHAPES:
            runs[shape].append(measure(fns[shape], args.repeats))
    result = dict(rank=tfps.rank(), size=tfps.size(), servers=basics.num_servers(),
                  tensors=args.tensors, kb=args.kb, repeats=args.repeats, rounds=args.rounds,
                  shapes={})
    for shape, measured in runs.items():
        names = sorted({name for _, _, per in measured for name in per})
        result["shapes"][shape] = dict(
            cpu_s=float(np.median([m[0] for m in measured])),
            wall_s=float(np.median([m[1] for m in measured])),
            threads={name: float(np.median([per.get(name, 0.0) for _, _, per in measured]))
                     for name in names})
    print("TENSOR_CPU_RESULT " + json.dumps(result), flush=True)
    tfps.shutdown()


if __name__ == "__main__":
    main()

"""Whether two workers' compute slows each other on this machine: a model's local step
(tf_ps_ops.plan.profile.local_step: forward and backward on made-up inputs, one
TensorFlow thread) timed in one process alone, then in two processes at once, with no
communication. Where the pair loses nothing, the extra CPU a worker's kernels take in
training comes from the communication beside them (profile.model_compute_loss).

    python3 benchmarks/local_step_pair.py [--model mobilenetv2] [--batch 8] [--steps 40]

Prints each process's median step and CPU-seconds per step.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(args):
    sys.path.insert(0, str(HERE.parent))
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from tf_ps_ops.plan import profile
    from train_models import build_model

    run = profile.local_step(build_model(args.model), args.batch)
    for _ in range(3):
        run()
    while time.time() < args.start_at:  # the pair starts together
        time.sleep(0.005)
    times, cpu = [], time.process_time()
    for _ in range(args.steps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    cpu = (time.process_time() - cpu) / args.steps
    print(f"median step {np.median(times):.4f} s, CPU {cpu:.4f} s per step", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mobilenetv2")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--start-at", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.start_at is not None:
        return child(args)
    for count in (1, 2):
        start_at = time.time() + 30  # after TensorFlow's import and the warm-up steps
        argv = [sys.executable, __file__, "--model", args.model, "--batch", str(args.batch),
                "--steps", str(args.steps), "--start-at", str(start_at)]
        procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
                 for _ in range(count)]
        for i, proc in enumerate(procs):
            out, _ = proc.communicate(timeout=600)
            label = "alone" if count == 1 else f"side by side, process {i + 1}"
            print(f"{args.model}, batch {args.batch}, {label}: {out.strip()}", flush=True)
            if proc.returncode:
                return proc.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())

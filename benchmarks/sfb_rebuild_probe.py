"""SFB's rebuild CPU against its number of factor rows K, beside the planner's two-point
probe (tf_ps_ops.plan.sfb_probe.sfb_rebuild_costs): what it costs per element of the N×M
result and worker, for K from 4 to 256, and what the line through K = 16 and 128 and the
K = 16 rate alone each predict.

    python3 tf_ps_ops/run.py -np 2 -ns 1 python3 benchmarks/sfb_rebuild_probe.py \
        [--shape 1024x1024] [--ks 4,16,32,64,128,256]

Each K: a real factor exchange among the workers and the rebuild of an N×M kernel's
gradient (--shape; default the planner's probe's 1024×1024; sfb.ops.factor_gradient),
the process's CPU time, the median of 5 after one warm-up call; one intra-op and one
inter-op TensorFlow thread per worker. Rank 0 prints the table
(results/sfb_rebuild_probe.md has runs).
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

import tf_ps_ops as hvd  # noqa: E402
from sfb import ops as sfb_ops  # noqa: E402
from tf_ps_ops.plan import sfb_probe  # noqa: E402


def cpu_per_element(kernel, k):
    n, m = kernel.shape
    return sfb_probe.rebuild_cpu(tf, sfb_ops, kernel, k, f"probe.k{k}") / (n * m * hvd.size())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="1024x1024", help="N x M of the kernel")
    parser.add_argument("--ks", default="4,16,32,64,128,256", help="factor rows per worker")
    args = parser.parse_args()
    try:
        n, m = (int(d) for d in args.shape.lower().split("x"))
        ks = [int(k) for k in args.ks.split(",")]
    except ValueError:
        parser.error("--shape takes NxM and --ks a comma-separated list of integers")
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    hvd.init()
    kernel = tf.Variable(tf.zeros([n, m]), trainable=False)
    measured = {k: cpu_per_element(kernel, k) for k in ks}
    rate, fixed = sfb_probe.sfb_rebuild_costs(tf, "probe.fit")
    if hvd.rank() == 0:
        print(f"{hvd.size()} workers, a {n}×{m} kernel; the planner's probe (1024×1024): "
              f"{rate / 1e9:.3g} GMAC/s + {fixed * 1e9:.3g} ns per element and worker\n")
        print("| K | measured ns/element/worker | the probe's line (16, 128) |")
        print("|---|---|---|")
        for k, seconds in measured.items():
            print(f"| {k} | {seconds * 1e9:.3g} | {(k / rate + fixed) * 1e9:.3g} |")
    hvd.shutdown()


if __name__ == "__main__":
    main()

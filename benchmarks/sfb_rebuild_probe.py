"""SFB's rebuild CPU against its number of factor rows K, beside the planner's two-point
probe (tf_ps_ops.plan.measure.sfb_rebuild_costs): what it costs per element of the N×M
result and worker, for K from 4 to 256, and what the line through K = 16 and 128 and the
K = 16 rate alone each predict.

    python3 tf_ps_ops/run.py -np 2 -ns 1 python3 benchmarks/sfb_rebuild_probe.py

Each K: a real factor exchange among the workers and the rebuild of a 1024×1024 kernel's
gradient (sfb.ops.factor_gradient), the process's CPU time, the median of 5 after one
warm-up call; one intra-op and one inter-op TensorFlow thread per worker. Rank 0 prints
the table (results/sfb_rebuild_probe.md has a run).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

import tf_ps_ops as hvd  # noqa: E402
from sfb import ops as sfb_ops  # noqa: E402
from tf_ps_ops.plan import measure  # noqa: E402

N = M = 1024
KS = (4, 16, 32, 64, 128, 256)


def cpu_per_element(kernel, k):
    return measure.rebuild_cpu(tf, sfb_ops, kernel, k, f"probe.k{k}") / (N * M * hvd.size())


def main():
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    hvd.init()
    kernel = tf.Variable(tf.zeros([N, M]), trainable=False)
    measured = {k: cpu_per_element(kernel, k) for k in KS}
    rate, fixed = measure.sfb_rebuild_costs(tf, "probe.fit")
    if hvd.rank() == 0:
        print(f"{hvd.size()} workers; the planner's probe: {rate / 1e9:.3g} GMAC/s + "
              f"{fixed * 1e9:.3g} ns per element and worker\n")
        print("| K | measured ns/element/worker | the line (16, 128) | K = 16's rate alone |")
        print("|---|---|---|---|")
        for k, seconds in measured.items():
            print(f"| {k} | {seconds * 1e9:.3g} | {(k / rate + fixed) * 1e9:.3g} | "
                  f"{k * measured[16] / 16 * 1e9:.3g} |")
    hvd.shutdown()


if __name__ == "__main__":
    main()

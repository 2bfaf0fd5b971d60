"""SFB's rebuild, probed for the cost model (measure.measure_cluster): a real exchange of
factors among the workers and the rebuild of the N×M gradient from them, timed in CPU at
two K, and the line through both (Machine.rebuild_rate, Machine.rebuild_per_element).
"""

from tf_ps_ops.plan import tensor_probe


def sfb_rebuild_costs(tf, name, ks=(16, 128), n=1024, m=1024):
    """(multiply-adds per CPU-second, CPU-seconds per element of the N×M result and
    worker) of SFB's gradient from factors, or None where the SFB ops are not built: a
    real exchange of K×(N+M) factors among the workers and the rebuild of the N×M sum
    (sfb.ops), its exchange's CPU included, at two K, and the line through both
    (rebuild_line): a rebuild also costs something per element of the result whatever
    K (its loads and stores, the exchange), so the rate of a small-K probe alone
    overcounts a large K. Here, 2 workers: 2.4-2.7 ns per element and worker at
    K = 16, 6.5-8.7 at K = 128 (a BERT-shaped layer's: 4 sequences of 32 tokens), where
    K = 16's rate alone predicted 19-22 (benchmarks/sfb_rebuild_probe.py). Collective."""
    try:
        from sfb import ops as sfb_ops
    except Exception:  # noqa: BLE001 - the planner keeps its default
        return None
    from tf_ps_ops.common import basics

    kernel = tf.Variable(tf.zeros([n, m]), trainable=False)
    return rebuild_line(ks, [rebuild_cpu(tf, sfb_ops, kernel, k, f"{name}.k{k}")
                             / (n * m * basics.size()) for k in ks])


def rebuild_cpu(tf, sfb_ops, kernel, k, name, repeats=5):
    """CPU-seconds of one exchange of K factor rows for `kernel` and its rebuild (a
    tf.function of sfb.ops.factor_gradient; the median of `repeats` after a first call).
    Collective."""
    n, m = (int(d) for d in kernel.shape)
    u, v = tf.random.normal([k, m]), tf.random.normal([k, n])
    once = tf.function(lambda: sfb_ops.factor_gradient(u, v, kernel.handle, name)[:1])
    return max(tensor_probe.median_cpu_seconds(once, repeats), 1e-6)


def rebuild_line(ks, seconds):
    """(multiply-adds per second, seconds per element whatever K) of the line through
    two probes' seconds per element of the result at K = ks[0] and ks[1] (K
    multiply-adds each). Noise that hides the multiply-adds (no rise from the smaller K)
    gives the larger K's rate and no fixed part; a line that would cross below zero, the
    line through the origin and the larger K's point."""
    (k1, k2), (c1, c2) = ks, seconds
    slope = (c2 - c1) / (k2 - k1)
    if slope <= 0 or c1 - k1 * slope < 0:
        return k2 / c2, 0.0
    return 1 / slope, c1 - k1 * slope

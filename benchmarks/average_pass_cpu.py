"""CPU cost of op=Average's division pass over the dense MLP's gradients (784-4096x3-10,
36.8 M floats), on one TF thread: what fusing the division into the engine's copy of the
answer into the output tensor would save per step per worker (benchmarks/RESULTS.md,
"The idle CPU target").

    python3 benchmarks/average_pass_cpu.py

The identity pass is the floor (a tf.function call over the same tensors).
"""
import time, resource, tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
shapes = [(784, 4096), (4096,), (4096, 4096), (4096,), (4096, 4096), (4096,), (4096, 10), (10,)]
gs = [tf.random.normal(s) for s in shapes]
two = tf.constant(2.0)
@tf.function
def avg(gs):
    return [g / two for g in gs]
@tf.function
def ident(gs):
    return [tf.identity(g) for g in gs]
for f in (avg, ident):
    f(gs)
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
for name, f in (("divide", avg), ("identity", ident), ("divide", avg), ("identity", ident)):
    c0 = cpu(); n = 40
    for _ in range(n): out = f(gs); _ = out[0].numpy()[0, 0]
    print(name, "%.4f CPU-s per step" % ((cpu() - c0) / n))
print("floats", sum(int(tf.size(g)) for g in gs))

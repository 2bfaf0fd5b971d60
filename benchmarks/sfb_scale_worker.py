"""A TensorFlow worker for benchmarks/sfb_scale.py: SFB, PS and the decentralized
algorithms at N workers, one small model, bytes counted by the engine.

    sfb_scale_worker.py OUT_DIR

The model: Input(1024) -> Dense(1024, tanh, "fc1") -> Dense(10, "out"), K = 32 rows per
worker and step. In order, every worker:
1. trains it with `sfb.convert(mode="hybrid", batch_size=K)` (HybComm picks per layer at
   this N and the cluster's S) under fit and DistributedOptimizer: one step (with the
   initial broadcast), then STEPS measured steps;
2. trains the same model by push_pull only (mode "ps"), the same way;
3. takes one D-PSGD step on a 1024x1024 variable with each of Decentralized("ring"),
   Decentralized("shift_one") and LowPrecisionDecentralized() (int8): ring and
   shift_one are checked bit for bit against NumPy (values chosen exact in float32, as
   tests/multiprocess/algorithm_workers/exact_worker.py), int8's first round (its own
   int8-coded copy) within a quantisation step.
Bytes per step: the engine's counters (tfps_peer_bytes_sent: the peer mesh;
tfps_bytes_sent: to the servers and scheduler). Connections: this process's TCP
connections in state ESTABLISHED (/proc/net/tcp), and its socket descriptors; memory: its
anonymous RSS at the end (TF's libraries are shared between the workers). Each rank
writes OUT_DIR/rank-<r>.json; rank 0 also OUT_DIR/weights.npz (its weights after the
first step and at the end of both trainings) for the single-process oracle.
"""

import ctypes
import hashlib
import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

import keras  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sfb  # noqa: E402
import tf_ps_ops as hvd  # noqa: E402
from sfb import policy  # noqa: E402
from tf_ps_ops.algorithms import Decentralized, LowPrecisionDecentralized  # noqa: E402

FEATURES, UNITS, OUTPUTS = 1024, 1024, 10
K = 32
STEPS = 3  # measured, after one step with the broadcast
LEARNING_RATE = 0.05
SHAPE = (FEATURES, UNITS)  # the decentralized steps' variable
LR = 0.5


def dataset(rows, seed=1234):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, FEATURES)).astype(np.float32)
    w = rng.normal(size=(FEATURES, OUTPUTS)).astype(np.float32) / 32
    return x, np.tanh(x @ w).astype(np.float32)


def batches(x, rank, size, first, count):
    """Worker `rank`'s rows of global batches first..first+count-1 (global batch size*K)."""
    rows = x[first * size * K:(first + count) * size * K]
    return rows.reshape(count, size, K, -1)[:, rank].reshape(count * K, -1)


def mlp(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((FEATURES,)),
                             keras.layers.Dense(UNITS, activation="tanh", name="fc1"),
                             keras.layers.Dense(OUTPUTS, name="out")])


def counter(name):
    from tf_ps_ops.common import library as _library

    function = getattr(_library.c_api(), name)
    function.restype = ctypes.c_ulonglong
    return lambda: int(function())


def connections():
    """(ESTABLISHED TCP connections, socket descriptors) of this process."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    established = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "01" and fields[9] in inodes:
                    established += 1
    return established, len(inodes)


def train(model, x, y, rank, size, peer_sent, sent):
    """One fit step (with the broadcast), then STEPS measured; returns the weights after
    the first step, and bytes and seconds per measured step."""
    model.compile(optimizer=hvd.DistributedOptimizer(
        keras.optimizers.SGD(LEARNING_RATE, momentum=0.9)), loss="mse", jit_compile=False)
    model.fit(batches(x, rank, size, 0, 1), batches(y, rank, size, 0, 1), batch_size=K,
              epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    first = model.get_weights()
    before_peer, before, start = peer_sent(), sent(), time.perf_counter()
    model.fit(batches(x, rank, size, 1, STEPS), batches(y, rank, size, 1, STEPS),
              batch_size=K, epochs=1, shuffle=False, verbose=0)
    return first, {"peer_bytes_per_step": (peer_sent() - before_peer) / STEPS,
                     "server_bytes_per_step": (sent() - before) / STEPS,
                     "step_s": (time.perf_counter() - start) / STEPS}


def _index():
    return np.arange(SHAPE[0] * SHAPE[1], dtype=np.int64).reshape(SHAPE)


def weights_of(r, multiple):
    """Rank r's weights: `multiple` times integers in [-20, 20], so that a mix of three
    (multiples of 3) or of two (of 2) is exact in float32."""
    return (multiple * ((_index() * 7 + r * 13) % 41 - 20)).astype(np.float32)


def gradient_of(r):
    """Rank r's gradient: halves of integers in [-8, 8), exact after LR = 0.5."""
    return (((_index() * 5 + r * 3) % 16 - 8) / 2).astype(np.float32)


def neighbour_step(algorithm, multiple, peer_sent):
    """One tape step of `algorithm` on a linear loss whose gradient is gradient_of(rank);
    returns the weights after it and the peer bytes it sent."""
    r = hvd.rank()
    w = tf.Variable(weights_of(r, multiple))
    before = peer_sent()
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.convert_to_tensor(w) * gradient_of(r))
    tape = hvd.DistributedGradientTape(tape, algorithm=algorithm)
    (grad,) = tape.gradient(loss, [w])
    keras.optimizers.SGD(LR).apply([grad], [w])
    return w.numpy(), peer_sent() - before


def decentralized(peer_sent):
    r, n = hvd.rank(), hvd.size()
    found = {}
    got, sent = neighbour_step(Decentralized("ring"), 3, peer_sent)
    left, right = (r - 1) % n, (r + 1) % n
    mix = (weights_of(r, 3) + (weights_of(left, 3) + weights_of(right, 3))) / np.float32(3)
    ring = mix - LR * gradient_of(r)
    np.testing.assert_array_equal(got, ring, err_msg=f"rank {r}: ring D-PSGD")
    found["ring"] = {"peer_bytes_per_step": sent, "peers": 2}
    got, sent = neighbour_step(Decentralized("shift_one"), 2, peer_sent)
    from tf_ps_ops.algorithms.decentralized import shift_one_peer
    peer = shift_one_peer(r, n, 0)
    want = (weights_of(r, 2) + weights_of(peer, 2)) / np.float32(2) - LR * gradient_of(r)
    np.testing.assert_array_equal(got, want, err_msg=f"rank {r}: shift_one D-PSGD, peer {peer}")
    found["shift_one"] = {"peer_bytes_per_step": sent, "peers": 1}
    got, sent = neighbour_step(LowPrecisionDecentralized(), 3, peer_sent)
    # The public copies start at zero, so the first round sends x itself, int8-coded, and
    # each worker's weights become its own copy as the neighbours know it (the mixing
    # comes in later rounds): x within a quantisation step (range 3*20 = 60 over 127).
    error = np.abs(got - (weights_of(r, 3) - LR * gradient_of(r))).max()
    assert error <= 60 / 127, f"rank {r}: int8 D-PSGD's first round is off by {error}"
    found["low_precision_int8"] = {"peer_bytes_per_step": sent, "peers": 2,
                                   "max_error": float(error)}
    return found


def main():
    out = sys.argv[1]
    hvd.init()
    r, n, s = hvd.rank(), hvd.size(), hvd.num_servers()
    peer_sent, sent = counter("tfps_peer_bytes_sent"), counter("tfps_bytes_sent")
    x, y = dataset((1 + STEPS) * n * K)
    plain = mlp(seed=100 + r)  # different on every worker until fit's broadcast
    hybrid = sfb.convert(plain, mode="hybrid", batch_size=K)
    kinds = {layer.name: ("sfb" if isinstance(layer, sfb.Dense) else "ps")
             for layer in hybrid.layers}
    first, by_hybrid = train(hybrid, x, y, r, n, peer_sent, sent)
    final_hybrid = hybrid.get_weights()
    by_ps_model = mlp(seed=100 + r)
    _, by_ps = train(by_ps_model, x, y, r, n, peer_sent, sent)
    final_ps = by_ps_model.get_weights()
    neighbours = decentralized(peer_sent)
    established, sockets = connections()
    hvd.barrier()  # nobody shuts down (closing its connections) before all have counted
    with open("/proc/self/status") as f:
        status = {line.split(":")[0]: line.split()[1] for line in f if line.startswith("Rss")}
    digest = hashlib.sha256(b"".join(w.tobytes() for w in final_hybrid + final_ps)).hexdigest()
    plans = {f"{where}": [d.__dict__ for d in policy.plan(plain, K, n, servers, colocated)]
             for where, servers, colocated in (("this_job", s, True), ("colocated", n, True),
                                               ("dedicated", 2, False))}
    with open(os.path.join(out, f"rank-{r}.json"), "w") as f:
        json.dump({"rank": r, "size": n, "servers": s, "kinds": kinds, "hybrid": by_hybrid,
                   "ps": by_ps, "decentralized": neighbours,
                   "tcp_established": established, "sockets": sockets,
                   "rss_anon_mb": int(status["RssAnon"]) // 1024,
                   "weights_sha256": digest, "plans": plans}, f)
    if r == 0:
        np.savez(os.path.join(out, "weights.npz"),
                 **{f"first.{i}": w for i, w in enumerate(first)},
                 **{f"hybrid.{i}": w for i, w in enumerate(final_hybrid)},
                 **{f"ps.{i}": w for i, w in enumerate(final_ps)})
    hvd.shutdown()
    print("sfb scale ok", flush=True)


if __name__ == "__main__":
    main()

"""A data-parallel training worker without TensorFlow: a two-layer MLP (tanh) in NumPy,
float32, trained by SGD on the mean squared error; each step's gradients are summed over
the workers with the core's push_pull and divided by the size. `single_process()` trains
the same model on the concatenated global batches in one process: the oracle.

    mlp_train_worker.py OUT_DIR

Writes OUT_DIR/rank<r>.npz (the trained weights) and prints "stats {json}" (the engine's
counters); on an error prints it to stderr and exits 3.
"""

import json
import os
import sys

import numpy as np

STEPS, BATCH, IN, HIDDEN, OUT = 8, 16, 64, 256, 8  # ~18 K parameters, ~74 KB of gradient
LEARNING_RATE = 0.05


def data(size):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((STEPS, size * BATCH, IN)).astype(np.float32)
    y = np.sin(x[..., :OUT] * 2.0).astype(np.float32)
    return x, y


def initial():
    rng = np.random.default_rng(3)
    return {"w1": (rng.standard_normal((IN, HIDDEN)) / 8).astype(np.float32),
            "b1": np.zeros(HIDDEN, np.float32),
            "w2": (rng.standard_normal((HIDDEN, OUT)) / 16).astype(np.float32),
            "b2": np.zeros(OUT, np.float32)}


def gradients(p, x, y, rows):
    """Gradients of the global mean loss contributed by these `rows` of `rows_total`."""
    h = np.tanh(x @ p["w1"] + p["b1"])
    out = h @ p["w2"] + p["b2"]
    d_out = (2.0 / (rows * OUT)) * (out - y)
    d_h = (d_out @ p["w2"].T) * (1 - h * h)
    return {"w1": x.T @ d_h, "b1": d_h.sum(0), "w2": h.T @ d_out, "b2": d_out.sum(0)}


def sgd(p, g):
    for name in p:
        p[name] = (p[name] - np.float32(LEARNING_RATE) * g[name]).astype(np.float32)


def single_process(size):
    x, y = data(size)
    p = initial()
    for step in range(STEPS):
        sgd(p, gradients(p, x[step], y[step], size * BATCH))
    return p


def main():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from native import init_from_env, load_core

    core = load_core()
    try:
        rank, size = init_from_env(core)
        x, y = data(size)
        p = initial()
        mine = slice(rank * BATCH, (rank + 1) * BATCH)
        names = sorted(p)
        for step in range(STEPS):
            g = gradients(p, x[step][mine], y[step][mine], size * BATCH)
            summed = core.push_pull_group(names, [g[n] for n in names])
            sgd(p, dict(zip(names, summed)))
        np.savez(os.path.join(sys.argv[1], f"rank{rank}.npz"), **p)
        print(f"local rank {core.local_rank()} of {core.local_size()}", flush=True)
        print("stats " + json.dumps(core.stats()), flush=True)
        core.shutdown()
    except RuntimeError as e:
        print(f"push_pull failed: {e}", file=sys.stderr, flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main()

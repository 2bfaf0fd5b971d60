"""One process, one core: a training step of a large embedding table alone (forward,
gradient, optimizer update in one tf.function), with Keras 3's Embedding and with
tf_ps_ops.keras.Embedding, for the optimizers a team would use. Keras's layer reads the
whole table each step; TensorFlow copies a table whose buffer a row update must not
change under that read. Ours reads the rows (ResourceGather), which in turn makes the
table copy on a dense read: faster where the optimizer updates rows, slower where it
updates the whole table anyway.

    .venv/bin/python benchmarks/embedding_lookup.py [--rows 2000000] [--dim 64]
        [--batch 64] [--lookups 8] [--steps 5] [--out results/embedding_lookup.md]
    tfps-run -np 1 -ns 1 .venv/bin/python benchmarks/embedding_lookup.py --ps \
        --out benchmarks/results/embedding_lookup_ps.md

--ps: PS mode's optimizers (tf_ps_ops.optimizers, the update on a ps_server), which
write the touched rows into the worker's table for plain SGD and Adagrad.

Writes a Markdown table (median step seconds, ratio ours ÷ Keras's) measured in one run.
"""

import argparse
import os
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

OPTIMIZERS = (("SGD", {}), ("SGD", {"momentum": 0.9}), ("Adagrad", {}), ("Adam", {}))
PS_OPTIMIZERS = (("SGD", {}), ("Adagrad", {}))  # the ones that send rows in PS mode


def table_step(layer, optimizer, ids):
    """A tf.function training step of the embedding `layer` alone on `ids` (a batch of
    lookups): forward, gradient and the optimizer's update."""
    import tensorflow as tf

    layer.build((None, ids.shape[1]))
    optimizer.build(layer.trainable_variables)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(ids) ** 2)
        optimizer.apply(tape.gradient(loss, layer.trainable_variables),
                        layer.trainable_variables)
        return loss

    return step


def step_seconds(layer_class, optimizer, ids, rows, dim, steps):
    from tf_ps_ops.plan import tensor_probe

    step = table_step(layer_class(rows, dim), optimizer, ids)
    step()  # the first row update switches the table's read mode
    return tensor_probe.median_seconds(step, steps)  # after one more untimed step


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lookups", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--ps", action="store_true",
                        help="PS mode's optimizers (run under tfps-run with a server)")
    parser.add_argument("--out", default=str(HERE / "results" / "embedding_lookup.md"))
    args = parser.parse_args()

    import keras
    import numpy as np
    import tensorflow as tf

    from tf_ps_ops.training.embedding import Embedding

    optimizers, cases, where = keras.optimizers, OPTIMIZERS, "in one process"
    if args.ps:
        import tf_ps_ops
        from tf_ps_ops import optimizers

        tf_ps_ops.init()
        cases, where = PS_OPTIMIZERS, "in PS mode (1 worker, 1 ps_server)"
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    ids = tf.constant(np.random.default_rng(0).integers(0, args.rows // 20,
                                                        (args.batch, args.lookups)), tf.int32)
    command = " ".join(["tfps-run -np 1 -ns 1"] * args.ps + [
        ".venv/bin/python", "benchmarks/embedding_lookup.py"] + sys.argv[1:])
    lines = [f"# A {args.rows:,} × {args.dim} embedding table's training step: Keras 3's "
             f"Embedding vs tf_ps_ops.keras.Embedding, {where}", "",
             f"`{command}`"
             f" on {platform.node() or 'this machine'} ({os.cpu_count()} cores, one TF "
             f"thread), TF {tf.__version__}, Keras {keras.__version__}; {args.batch}×"
             f"{args.lookups} lookups per step, median of {args.steps} steps.", "",
             "| optimizer | Keras's Embedding s/step | tf_ps_ops.keras.Embedding s/step | "
             "ours ÷ Keras's |", "|---|---|---|---|"]
    for name, kwargs in cases:
        seconds = []
        for layer_class in (keras.layers.Embedding, Embedding):
            optimizer = getattr(optimizers, name)(**kwargs)
            seconds.append(step_seconds(layer_class, optimizer, ids, args.rows, args.dim,
                                        args.steps))
        label = name + "".join(f" ({k} {v})" for k, v in kwargs.items())
        lines.append(f"| {label} | {seconds[0]:.4f} | {seconds[1]:.4f} | "
                     f"{seconds[1] / seconds[0]:.3g} |")
        print(lines[-1], flush=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()

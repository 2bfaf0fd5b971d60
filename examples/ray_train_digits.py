"""The digits MLP of train_digits.py trained by Ray actors (tf_ps_ops.ray.RayExecutor):
a scheduler and servers as actors spread over the nodes, workers as actors packed onto
them; the driver gets rank 0's result back.

    python3 examples/ray_train_digits.py                    # a Ray cluster of this machine
    python3 examples/ray_train_digits.py --address auto     # join a running cluster

Needs `pip install -r requirements-ray.txt`. On a cluster every node needs this checkout
(or the package and this folder) at the same path, as the actors import train_digits.
"""

import argparse
import os

import ray

from tf_ps_ops.ray import RayExecutor

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--address", help="a running Ray cluster ('auto'); default: start one")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--num-servers", type=int, help="default: one per Ray node")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per worker")
    return parser.parse_args()


def train(epochs, batch_size):
    """Runs in each worker actor: the place comes from the actor's environment."""
    import tensorflow as tf

    import tf_ps_ops as hvd
    import train_digits

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    hvd.init()
    try:
        loss, accuracy = train_digits.train(epochs, batch_size)
        return {"rank": hvd.rank(), "size": hvd.size(), "loss": loss, "accuracy": accuracy}
    finally:
        hvd.shutdown()


def main():
    args = parse_args()
    # The actors import train_digits from this folder, on whichever node they run.
    path = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)
    runtime_env = {"env_vars": {"PYTHONPATH": path, "TF_CPP_MIN_LOG_LEVEL": "2"}}
    if args.address:
        ray.init(address=args.address, runtime_env=runtime_env)
    else:
        ray.init(num_cpus=args.num_workers + 2, include_dashboard=False,
                 runtime_env=runtime_env)
    executor = RayExecutor(num_workers=args.num_workers, num_servers=args.num_servers)
    try:
        executor.start(timeout_s=300)  # Ray starts actors slowly on a busy machine
        result = executor.run(train, args=(args.epochs, args.batch_size))
        print(f"rank {result['rank']} of {result['size']}: held-out accuracy "
              f"{result['accuracy']:.4f}, loss {result['loss']:.4f}")
    finally:
        executor.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()

"""A worker that finds its place only from what the cluster manager set (TF_CONFIG, Slurm,
MPI variables: no TFPS_*), then push_pulls a few tensors and checks every sum against
NumPy (each rank regenerates the others' data from their seeds). Prints
"ok RANK SIZE NUM_SERVERS"; exits 4 on a wrong sum.
"""

import sys

import numpy as np
import tensorflow as tf

import tf_ps_ops as hvd

CASES = [("small", (3, 5), np.float32), ("ints", (1000,), np.int32),
         ("big", (1 << 18,), np.float32)]  # 1 MB: partitions on both servers


def data(rank, step, shape, dtype):
    rng = np.random.default_rng(1000 * rank + step)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-1000, 1000, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    for step in range(2):
        for name, shape, dtype in CASES:
            got = hvd.push_pull(tf.constant(data(rank, step, shape, dtype)), average=False,
                                name=name).numpy()
            expected = sum(data(r, step, shape, dtype) for r in range(size))
            if not np.allclose(got, expected, rtol=1e-5, atol=1e-5):
                print(f"step {step}, {name}: wrong sum", file=sys.stderr)
                sys.exit(4)
    print("ok", rank, size, hvd.num_servers(), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()

"""Run by tfps-run from an installed tf_ps_ops (tests/packaging): one allreduce of each
kind, checked against NumPy. Prints where tf_ps_ops was imported from, then "ok"."""

import numpy as np
import tensorflow as tf

import tf_ps_ops as hvd


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    print("imported", hvd.__file__, flush=True)

    def data(r):
        return np.arange(12, dtype=np.float32).reshape(3, 4) * (r + 1) - r

    summed = hvd.allreduce(tf.constant(data(rank)), op=hvd.Sum, name="sum").numpy()
    np.testing.assert_allclose(summed, sum(data(r) for r in range(size)), rtol=1e-6)
    average = hvd.allreduce(tf.constant(data(rank)), name="average").numpy()
    np.testing.assert_allclose(average, sum(data(r) for r in range(size)) / size, rtol=1e-6)
    print("ok", rank, flush=True)


if __name__ == "__main__":
    main()

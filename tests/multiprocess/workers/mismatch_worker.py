"""Worker for test_ops.py: workers that disagree on a tensor's shape or dtype all get a
FailedPreconditionError (Horovod's class for mismatched collectives) naming the tensor, and
the cluster keeps working afterwards.

Started with BytePS's DMLC_* environment instead of TFPS_*.
"""

import os

import numpy as np
import tensorflow as tf

from harness import run_checks


def expect_mismatch(name, call):
    try:
        call()
    except tf.errors.FailedPreconditionError as error:
        assert name in str(error), f"the error does not name {name!r}: {error}"
        return
    raise AssertionError(f"{name}: no FailedPreconditionError")


def check_dmlc_environment(hvd):
    assert hvd.rank() == int(os.environ["DMLC_WORKER_ID"])
    assert hvd.size() == int(os.environ["DMLC_NUM_WORKER"])
    assert hvd.num_servers() == int(os.environ["DMLC_NUM_SERVER"])


def check_shape_mismatch(hvd):
    shape = (3,) if hvd.rank() == 0 else (4,)
    expect_mismatch("mismatch.shape",
                            lambda: hvd.push_pull(tf.zeros(shape), name="mismatch.shape"))


def check_dtype_mismatch(hvd):
    # Same shape and byte count: only the dtype differs.
    dtype = tf.int32 if hvd.rank() == 0 else tf.float32
    expect_mismatch("mismatch.dtype",
                            lambda: hvd.push_pull(tf.zeros(4, dtype), name="mismatch.dtype"))


def check_mismatch_in_tf_function(hvd):
    shape = (2, 3) if hvd.rank() == 0 else (3, 2)
    reduce = tf.function(lambda x: hvd.push_pull(x, name="mismatch.graph"))
    expect_mismatch("mismatch.graph", lambda: reduce(tf.zeros(shape)))


def check_broadcast_mismatch(hvd):
    shape = (5,) if hvd.rank() == 0 else (6,)
    expect_mismatch(
        "mismatch.broadcast",
        lambda: hvd.broadcast(tf.zeros(shape), root_rank=0, name="mismatch.broadcast"))


def check_cluster_still_works(hvd):
    for name in ("after.mismatch", "mismatch.shape"):  # also reuses a failed key
        result = hvd.push_pull(tf.ones(3), average=False, name=name)
        np.testing.assert_array_equal(result, np.full(3, hvd.size(), np.float32))


CHECKS = [check_dmlc_environment, check_shape_mismatch, check_dtype_mismatch,
          check_mismatch_in_tf_function, check_broadcast_mismatch, check_cluster_still_works]

if __name__ == "__main__":
    run_checks(CHECKS)

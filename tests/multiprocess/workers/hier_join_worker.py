"""join() with uneven data under hierarchical aggregation, through the Horovod API
(test_hierarchical_join.py, 3 workers on one host, TFPS_HIERARCHICAL=1), mirroring
process_sets_worker.check_join_with_uneven_data: a joined worker counts as zeros,
Average divides by size(), Min includes the zeros, join() returns the last rank to join,
and the same names work again afterwards. float32/float64 sums go through the local
leader, float16 and Min flat."""

import numpy as np
import tensorflow as tf

from harness import run_checks


def _uneven(hvd, steps, tag):
    me = hvd.rank()
    for step in range(steps[me]):
        x = tf.fill([3], float((step + 1) * (me + 1)))
        avg = hvd.allreduce(x, op=hvd.Average, name=f"{tag}.avg")
        total = hvd.allreduce(tf.cast(x, tf.float64), op=hvd.Sum, name=f"{tag}.f64")
        half = hvd.allreduce(tf.cast(x, tf.float16), op=hvd.Sum, name=f"{tag}.f16")
        smallest = hvd.allreduce(x, op=hvd.Min, name=f"{tag}.min")
        working = [r for r in range(3) if steps[r] > step]
        contributions = [(step + 1) * (r + 1) for r in working]
        np.testing.assert_allclose(avg.numpy(), [sum(contributions) / 3.0] * 3)
        np.testing.assert_array_equal(total.numpy(), [sum(contributions)] * 3)
        np.testing.assert_array_equal(half.numpy(), [sum(contributions)] * 3)
        want_min = min(contributions) if len(working) == 3 else 0.0
        np.testing.assert_array_equal(smallest.numpy(), [want_min] * 3)
    last = hvd.join()
    assert int(last) == int(np.argmax(steps)), int(last)
    for name in ("avg", "f64", "f16", "after"):
        np.testing.assert_array_equal(
            hvd.allreduce(tf.ones([2]) * (me + 1), op=hvd.Sum, name=f"{tag}.{name}").numpy(),
            [6, 6])


def check_join_a_member_first(hvd):
    assert hvd.local_size() == 3
    _uneven(hvd, [4, 2, 3], "member")


def check_join_the_leader_first(hvd):
    _uneven(hvd, [1, 4, 3], "leader")


CHECKS = [check_join_a_member_first, check_join_the_leader_first]

if __name__ == "__main__":
    run_checks(CHECKS)

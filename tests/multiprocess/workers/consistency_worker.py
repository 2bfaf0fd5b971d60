"""A worker of tests/multiprocess/test_consistency.py and benchmarks/consistency_bench.py.

Every step each worker "computes" (sleeps TEST_PACE seconds, TEST_SLOW_FACTOR times that
on rank TEST_SLOW_RANK) and then push_pulls, in summation mode, one-hot vectors: worker r
at step s pushes e[r*STEPS + s - 1], so the sum of a reply says exactly which pushes it
carries. With TEST_PS=1 it also updates a PS-mode variable with a constant gradient, so
the value read says how many updates the server had applied. What it read, and when each
step ended (wall clock, shared by the processes of one host), goes to
$TFPS_TEST_OUT/rank<r>.npz. TEST_DIE_AFTER=n: rank TEST_SLOW_RANK exits abruptly after n
steps; the others then record the step and error that stopped them.
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

STEPS = int(os.environ.get("TEST_STEPS", "20"))
PACE = float(os.environ.get("TEST_PACE", "0.02"))
SLOW_RANK = int(os.environ.get("TEST_SLOW_RANK", "-1"))
SLOW_FACTOR = float(os.environ.get("TEST_SLOW_FACTOR", "3"))
DIE_AFTER = int(os.environ.get("TEST_DIE_AFTER", "0"))
PS = os.environ.get("TEST_PS", "0") == "1"
BIG = int(os.environ.get("TEST_BIG", "1"))  # copies of the one-hot vector in "big"
PS_LR = 0.5
PS_GRAD = 1.0


def main():
    harness.pin_threads()
    import tensorflow as tf
    import tf_ps_ops as hvd
    from tf_ps_ops.common.library import ops

    # TEST_CONSISTENCY_<rank> overrides TEST_CONSISTENCY for one worker (a disagreement).
    mine = os.environ.get(f"TEST_CONSISTENCY_{harness.env_rank()}")
    hvd.init(consistency=mine or os.environ.get("TEST_CONSISTENCY") or None)
    rank, size = hvd.rank(), hvd.size()
    width = size * STEPS
    # A barrier (broadcasts stay bsp): every worker starts its clock together.
    hvd.broadcast(tf.constant([0.0]), root_rank=0, name="start")
    w = tf.Variable(np.zeros(4, np.float32)) if PS else None
    small, big, ps_values, ended = [], [], [], []
    error = ""
    start = time.time()
    for step in range(1, STEPS + 1):
        if rank == SLOW_RANK and DIE_AFTER and step > DIE_AFTER:
            os._exit(17)  # dies without a goodbye, as a crashed process would
        time.sleep(PACE * (SLOW_FACTOR if rank == SLOW_RANK else 1.0))
        onehot = np.zeros(width, np.float32)
        onehot[rank * STEPS + step - 1] = 1.0
        try:
            small.append(hvd.push_pull(tf.constant(onehot), average=False, name="onehot").numpy())
            big.append(hvd.push_pull(tf.constant(np.tile(onehot, BIG)), average=False,
                                     name="onehot_big").numpy()[:width])
            if PS:
                ops().ps_apply_gradient_descent(var=w.handle, alpha=np.float32(PS_LR),
                                                delta=np.full(4, PS_GRAD, np.float32),
                                                tensor_name="ps_constant")
                ps_values.append(w.numpy())
        except Exception as e:  # noqa: BLE001 — the dead-worker test expects this
            error = str(e)
            break
        ended.append(time.time() - start)
    out = os.environ["TFPS_TEST_OUT"]
    np.savez(os.path.join(out, f"rank{rank}.npz"), small=np.array(small), big=np.array(big),
             ps=np.array(ps_values), ended=np.array(ended), error=np.array(error),
             size=np.array(size))
    print(f"rank {rank}: {len(ended)} steps" + (f", stopped by: {error}" if error else ""),
          flush=True)
    if error:
        os._exit(3)  # the engine saw a dead peer: no goodbye to wait for
    hvd.shutdown()


if __name__ == "__main__":
    main()

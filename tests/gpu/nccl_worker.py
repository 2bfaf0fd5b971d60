"""One worker of the NCCL hierarchical check (run_gpu_checks.sh, docs/gpu.md): the workers
of one host, one GPU each, sum GPU tensors with NCCL; the local leader alone pushes the
local sum to the servers and broadcasts their answer back with NCCL.

Checks, against NumPy (the values are small integers, so every order of summation gives
the same bits): push_pull of GPU tensors of float32, float64, int32 and int64, one of them
large enough to go as several chunks (hierarchical.h: 4 MiB each), over two steps,
averaged and summed; the outputs are on the GPU. Prints `PASS name` / `FAIL name` lines and
exits 1 if any failed; run_gpu_checks.sh also looks for the leader's line saying NCCL sums.

NCCL takes one GPU per worker: with GPU_CHECKS_ONE_GPU_EACH=1 each worker sees only the GPU
of its local rank (CUDA_VISIBLE_DEVICES, set before TensorFlow starts). GPU_CHECKS_DEVICE=
/CPU:0 is the dry run on the CPU (tests/multiprocess/test_nccl_fallback.py): the same sums,
which go through shared memory there.
"""

import os
import sys

DEVICE = os.environ.get("GPU_CHECKS_DEVICE", "/GPU:0")
if os.environ.get("GPU_CHECKS_ONE_GPU_EACH") == "1":
    os.environ["CUDA_VISIBLE_DEVICES"] = os.environ.get("TFPS_LOCAL_RANK",
                                                        os.environ.get("TFPS_RANK", "0"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.framework import kernels  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(2)

import tf_ps_ops as hvd  # noqa: E402

FAILED = []
# (dtype, shape): 1.25M float32 elements are 5 MB, two chunks of hierarchical.h's 4 MiB.
CASES = [(np.float32, (1000,)), (np.float64, (7, 3)), (np.int32, (33,)), (np.int64, (5,)),
         (np.float32, (1250, 1000))]


def check(name, ok, detail=""):
    print("rank %d %s %s %s" % (hvd.rank(), "PASS" if ok else "FAIL", name, detail), flush=True)
    if not ok:
        FAILED.append(name)


def rank_input(dtype, shape, rank, step):
    values = np.random.default_rng(1000 * step + rank).integers(-8, 8, shape)
    return values.astype(dtype)


def main():
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    # Whether this op library is a CUDA build (it registered GPU kernels): only such a build
    # offers NCCL, and says why it does not use it (test_nccl_fallback.py reads this).
    gpu_kernels = [k for k in kernels.get_registered_kernels_for_op("PsPushPull").kernel
                   if k.device_type == "GPU"]
    print("cuda_build %d" % bool(gpu_kernels), flush=True)
    for step in range(2):
        for dtype, shape in CASES:
            name = "nccl.%s.%s" % (np.dtype(dtype).name, "x".join(map(str, shape)))
            inputs = [rank_input(dtype, shape, r, step) for r in range(size)]
            want = np.sum(np.stack(inputs).astype(np.float64 if dtype in (np.float32, np.float64)
                                                  else np.int64), axis=0).astype(dtype)
            with tf.device(DEVICE):
                x = tf.identity(tf.constant(inputs[rank]))
                got = hvd.push_pull(x, average=False, name=name)
            placed = "GPU" in got.device.upper() or DEVICE.upper() != "/GPU:0"
            same = got.shape == want.shape and np.array_equal(got.numpy(), want)
            check("%s step %d" % (name, step), placed and same,
                  "" if same and placed else "on %s, max |diff| %s" % (
                      got.device, np.max(np.abs(got.numpy().astype(np.float64) - want))))
    # The average goes the same way (a sum, then a division on the device).
    with tf.device(DEVICE):
        x = tf.identity(tf.constant(rank_input(np.float32, (64,), rank, 9)))
        got = hvd.push_pull(x, average=True, name="nccl.average")
    want = np.mean([rank_input(np.float32, (64,), r, 9) for r in range(size)], axis=0)
    check("average", np.allclose(got.numpy(), want, rtol=1e-6), "")
    hvd.shutdown()
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())

"""One worker of the compressed push_pull check on GPU tensors (run_gpu_checks.sh part 4).

Every codec (fp16, bf16, int8, onebit, topk:0.05, randomk:0.05) on two tensor sizes (one
partition, and several: TFPS_PARTITION_BYTES is small), 3 steps each with error feedback on
(the job default), reduced with allreduce(op=Sum). CODEC_WORKER_DEVICE says where this
rank's tensors live: "gpu" (/GPU:0: the GPU encodes and decodes, gpu_push_codec.h), "cpu"
(/CPU:0: the CPU codecs), or "mixed" (rank 0 on the GPU, the others on the CPU). Writes
every output to $TFPS_GPU_OUT/codec_<device>_rank<r>.npz; compare_codec_runs.py then checks
that the gpu and mixed runs equal the cpu run bit for bit (same bytes on the wire, same
residuals), and this worker checks the first step against oracles:
  - the CPU codecs of _core applied as the servers do (decode each push, sum in float32,
    encode the sum, decode): bit-exact for fp16, bf16, int8, onebit and topk (a step-1
    residual is zero on every side);
  - NumPy's float32 sum, within each codec's error bound (relative L2 error).
With CODEC_WORKER_DEVICE=cpu it is its own CPU dry run.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(2)
tf.config.threading.set_inter_op_parallelism_threads(2)
for _gpu in tf.config.list_physical_devices("GPU"):
    tf.config.experimental.set_memory_growth(_gpu, True)  # two workers share one GPU

import tf_ps_ops as hvd  # noqa: E402
from tf_ps_ops.compression import Compression  # noqa: E402
from native import load_core  # noqa: E402  (the CPU codecs, for the step-1 oracle)

CODECS = {"fp16": Compression.fp16, "bf16": Compression.bf16, "int8": Compression.int8,
          "onebit": Compression.onebit, "topk": Compression.topk(0.05),
          "randomk": Compression.randomk(0.05)}
# Relative L2 error of one step against NumPy's sum (two workers: two encodings, the
# server's encoding of the sum). Sparse and 1-bit codecs lose most of a step by design
# (error feedback carries it over), so theirs is a sanity bound.
BOUND = {"fp16": 2e-3, "bf16": 1.5e-2, "int8": 3e-2, "onebit": 1.0, "topk": 1.0,
         "randomk": 1.0}
# CODEC_WORKER_SIZES / CODEC_WORKER_STEPS shorten the CPU dry run in the normal suite.
SIZES = [int(v) for v in os.environ.get("CODEC_WORKER_SIZES", "5000,300000").split(",")]
STEPS = int(os.environ.get("CODEC_WORKER_STEPS", "3"))
FAILS = []


def data(rank, n, step):
    return (np.random.default_rng(1000 * step + 7 * rank + n).standard_normal(n) * 2
            ).astype(np.float32)


def check(name, ok, detail=""):
    print("rank %d %s  %s %s" % (hvd.rank(), "PASS" if ok else "FAIL", name, detail),
          flush=True)
    if not ok:
        FAILS.append(name)


def server_model(core, name, grads):
    """Step 1 as the servers compute it with the CPU codecs (no residual yet), partition by
    partition as the engine cuts the tensor (TFPS_PARTITION_BYTES, TFPS_NUM_SERVERS)."""
    cid = core.CODECS[name]
    n = grads[0].size
    parts = core.partition_tensor(0, n, 4, int(os.environ.get("TFPS_PARTITION_BYTES", "524288")),
                                  int(os.environ.get("TFPS_NUM_SERVERS", "1")), 1)
    result = np.empty(n, np.float32)
    for _, offset, count, _ in parts:
        k = core.sparse_k(0.05, count) if name == "topk" else 0
        total = None
        for g in grads:
            piece = np.ascontiguousarray(g[offset:offset + count])
            d = core.codec_decode(cid, core.codec_encode(cid, piece, k, 0), count, 0)
            total = d if total is None else (total + d).astype(np.float32)
        result[offset:offset + count] = core.codec_decode(
            cid, core.codec_encode(cid, total, k, 0), count, 0)
    return result


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    mode = os.environ.get("CODEC_WORKER_DEVICE", "gpu")
    on_gpu = mode == "gpu" or (mode == "mixed" and rank == 0)
    device = "/GPU:0" if on_gpu else "/CPU:0"
    if on_gpu and not tf.config.list_physical_devices("GPU"):
        print("FAIL: no GPU visible to TensorFlow", flush=True)
        return 1
    core = load_core()
    out = {}
    for name, compression in CODECS.items():
        for n in SIZES:
            for step in range(1, STEPS + 1):
                g = data(rank, n, step)
                with tf.device(device):
                    x = tf.identity(tf.constant(g))
                    y = hvd.allreduce(x, op=hvd.Sum, compression=compression,
                                      name="codec_%s_%d" % (name, n))
                if on_gpu and "GPU" not in y.device.upper():
                    check("%s n=%d placed on the GPU" % (name, n), False, y.device)
                got = y.numpy()
                out["%s_%d_%d" % (name, n, step)] = got
                if step != 1:
                    continue
                grads = [data(r, n, step) for r in range(size)]
                want = np.sum(grads, axis=0, dtype=np.float32)
                err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
                check("%s n=%d step 1 vs NumPy" % (name, n), err <= BOUND[name],
                      "relative L2 error %.3g (bound %g)" % (err, BOUND[name]))
                if name != "randomk":
                    model = server_model(core, name, grads)
                    same = np.array_equal(got.view(np.uint32), model.view(np.uint32))
                    check("%s n=%d step 1 bit-equal to the CPU codecs" % (name, n), same,
                          "" if same else "first difference at %d"
                          % int(np.flatnonzero(got.view(np.uint32)
                                               != model.view(np.uint32))[0]))
    path = os.path.join(os.environ.get("TFPS_GPU_OUT", "."),
                        "codec_%s_rank%d.npz" % (mode, rank))
    np.savez(path, **out)
    print("rank %d codec worker (%s): %d failed; wrote %s" % (rank, mode, len(FAILS), path),
          flush=True)
    hvd.shutdown()
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())

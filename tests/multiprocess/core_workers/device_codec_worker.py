"""A worker without TensorFlow for the engine's DeviceCodec hook (engine/device_codec.h,
the path a GPU push_pull takes when it compresses on the GPU), driven by the host twin of
the GPU codec kernels (codec/codec_shared.h) through _core.push_pull_device_codec.

DEVICE_CODEC_MODE=cpu: every rank pushes with the engine's CPU codecs;
=hook: rank 0 pushes through the hook, the others with the CPU codecs (a GPU worker among
CPU workers); both enqueue each step's tensors together. Every codec with error feedback over 3 steps, one tensor cut into several
partitions and three small ones that fuse into one message (TFPS_FUSION_BYTES), and onebit
without feedback. Writes every result to $DEVICE_CODEC_OUT/<mode>_rank<r>.npz: the test
compares the two jobs bit for bit. Also checks, in hook mode, that the hook encoded once per
call and took one reply per partition, that the engine counts the encoded bytes, and which
calls the engine would hand a GPU kernel to encode (EncodesOnDevice)."""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
from native import init_from_env, load_core  # noqa: E402

STEPS = 3
SPECS = ["fp16", "bf16", "int8", "onebit", "topk:0.05", "randomk:0.1"]
N = 3 * 4096 + 1001  # partitions of 4096 floats (TFPS_PARTITION_BYTES=16384)
SMALL = [100, 37, 513]  # fused together


def inputs(rank, name, step, n):
    rng = np.random.default_rng([rank, step, sum(map(ord, name))])
    return (rng.standard_normal(n) * (1 + rank)).astype(np.float32)


def main():
    core = load_core()
    rank, size = init_from_env(core)
    mode = os.environ["DEVICE_CODEC_MODE"]
    hook = mode == "hook" and rank == 0
    parts_of_n = len(core.partition_tensor(core.key_of_name("x"), N, 4,
                                           int(os.environ["TFPS_PARTITION_BYTES"]),
                                           int(os.environ["TFPS_NUM_SERVERS"]), 1))
    results = {}
    runs = [(spec, 1) for spec in SPECS] + [("onebit", 0)]
    for spec, feedback in runs:
        names = [f"big.{spec}.{feedback}"] + [f"small{i}.{spec}.{feedback}"
                                              for i in range(len(SMALL))]
        sizes = [N] + SMALL
        for step in range(1, STEPS + 1):
            arrays = [inputs(rank, name, step, n) for name, n in zip(names, sizes)]
            before = core.stats()
            outs, counts = core.push_pull_device_codec(names, arrays, spec, feedback, hook)
            if hook:
                after = core.stats()
                assert counts[0] == (1, parts_of_n), counts
                assert all(c == (1, 1) for c in counts[1:]), counts
                want = sum(core.encoded_bytes(core.CODECS[spec.split(":")[0]], p[2],
                                              core.sparse_k(float(spec.split(":")[1]), p[2])
                                              if ":" in spec else 0)
                           for n in sizes
                           for p in core.partition_tensor(0, n, 4, 16384, 2, 1))
                got = after["codec_encoded_bytes"] - before["codec_encoded_bytes"]
                assert got == want, (spec, got, want)
                assert after["codec_raw_bytes"] - before["codec_raw_bytes"] == 4 * sum(sizes)
            else:
                assert all(c == (0, 0) for c in counts), counts  # the CPU codecs ran
            for name, out in zip(names, outs):
                results[f"{name}.{step}"] = out
        print(f"{spec} feedback={feedback}: {STEPS} steps done ({mode}, hook={hook})",
              flush=True)
    # What a GPU kernel is told: compressed float32 summations only.
    x = np.ones(10, np.float32)
    assert core.encodes_on_device("q", x, "int8") == "int8"
    assert core.encodes_on_device("q", x, "topk:0.25") == "topk:0.25"
    assert core.encodes_on_device("q", x, "") == "int8"  # TFPS_COMPRESSION
    assert core.encodes_on_device("q", x, "none") is None
    assert core.encodes_on_device("q", x, "int8", root_rank=0) is None  # a broadcast
    assert core.encodes_on_device("q", x, "int8", ps_apply=True) is None  # float32 answer
    print("EncodesOnDevice: as expected", flush=True)
    np.savez(os.path.join(os.environ["DEVICE_CODEC_OUT"], f"{mode}_rank{rank}.npz"), **results)
    core.shutdown()


if __name__ == "__main__":
    main()

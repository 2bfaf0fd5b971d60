"""Encode/decode speed of each codec in the C++ core (tf_ps_ops._core.time_codec: the
loops alone, best of N, no Python in the timed region). MB/s of float32 input. The last
column: encoding with error feedback (core.ErrorFeedback.encode, one call per timing,
best of N; onebit, topk, randomk only), the worker's and the server's path every step;
and decoding added into a float32 sum (the server's later pushes; onebit, int8 only).

    python benchmarks/codec_speed.py [--mb 16] [--repeat 5] [--simd scalar,avx2]

--simd: one table per instruction set of onebit's loops (core.codec_simd; the others'
loops do not depend on it); by default the one the CPU's best choice gives.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from native import load_core  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--simd", default="best")
    args = parser.parse_args()
    core = load_core()
    for level in args.simd.split(","):
        active = core.codec_simd(level)
        if level not in ("best", active):
            print(f"({level} not available on this CPU: skipped)")
            continue
        print(f"onebit loops: {active}")
        table(core, args)


def table(core, args):
    n = int(args.mb * (1 << 20) / 4)
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    print(f"| codec | encode MB/s | decode MB/s | bytes/elem | encode with feedback MB/s |"
          f" decode into a sum MB/s |  ({args.mb:g} MB float32)")
    print("|---|---|---|---|---|---|")
    for spec in ["fp16", "bf16", "int8", "onebit", "topk:0.01", "randomk:0.01"]:
        cid, ratio, _ = core.parse_codec(spec)
        k = core.sparse_k(ratio, n) if ":" in spec else 0
        enc, dec = core.time_codec(cid, x, k, args.repeat)
        mb = 4 * n / 1e6
        per = core.encoded_bytes(cid, n, k) / n
        fb = feedback_seconds(core, cid, x, k, args.repeat)
        fb_text = "—" if fb is None else f"{mb / fb:,.0f}"
        add = (f"{mb / core.time_decode_add(cid, x, args.repeat):,.0f}"
               if core.codec_decodes_adding(cid) else "—")
        print(f"| {spec} | {mb / enc:,.0f} | {mb / dec:,.0f} | {per:.3f} | {fb_text} | {add} |")


def feedback_seconds(core, cid, x, k, repeat):
    if cid not in (core.CODECS["onebit"], core.CODECS["topk"], core.CODECS["randomk"]):
        return None
    ef, best = core.ErrorFeedback(), float("inf")
    for step in range(repeat + 1):  # the first call allocates the residual
        t = time.perf_counter()
        ef.encode(1, 0, cid, x, k, step)
        if step > 0:
            best = min(best, time.perf_counter() - t)
    return best


if __name__ == "__main__":
    main()

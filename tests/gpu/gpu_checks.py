"""GPU checks of the CUDA code without TensorFlow (run by tests/gpu/run_gpu_checks.sh).

Loads build/native/_tfps_gpu_checks.so (tools/native_build.py --gpu-checks) with ctypes and
checks, on the GPU, against oracles:
  codecs   every codec's GPU encoding equals the CPU encoding byte for byte, and its GPU
           decoding equals the CPU decoding bit for bit (random data, ties, zeros of both
           signs, NaN/Inf chunks, sizes around the chunk edges)
  sfb      the GPU rebuild equals NumPy's rank-order float32/float64 loop bit for bit
  nccl     a communicator of one (one GPU) reduces and broadcasts (skipped without NCCL)
  overlap  staging copies on their own stream overlap the producing kernels (timed, not
           asserted: printed for the report)
Prints one line per check and a summary; exits 1 if any check failed.
"""

import argparse
import ctypes
import glob
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CODECS = {"none": 0, "fp16": 1, "bf16": 2, "int8": 3, "onebit": 4, "topk": 5, "randomk": 6}
ERR = 1024


class Lib:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.tfps_checks_encoded_bytes.restype = ctypes.c_uint64
        self.lib.tfps_checks_encoded_bytes.argtypes = [ctypes.c_int, ctypes.c_uint64,
                                                      ctypes.c_uint64]
        coder = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64,
                 ctypes.c_uint64, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        for name in ("tfps_cpu_encode", "tfps_cpu_decode", "tfps_gpu_encode", "tfps_gpu_decode"):
            getattr(self.lib, name).argtypes = coder
        for name in ("tfps_cpu_encode_feedback", "tfps_gpu_encode_feedback"):
            getattr(self.lib, name).argtypes = [
                ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int,
                ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        for name, t in (("tfps_gpu_sfb_rebuild_f32", ctypes.c_float),
                        ("tfps_gpu_sfb_rebuild_f64", ctypes.c_double)):
            getattr(self.lib, name).argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                                ctypes.c_int64, t, ctypes.c_void_p,
                                                ctypes.c_char_p, ctypes.c_size_t]
        self.lib.tfps_gpu_staging_overlap.argtypes = [ctypes.c_uint64, ctypes.c_int, ctypes.c_int,
                                                      ctypes.c_void_p, ctypes.c_char_p,
                                                      ctypes.c_size_t]
        self.lib.tfps_gpu_nccl_load.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        self.lib.tfps_gpu_nccl_single_rank.argtypes = [ctypes.c_void_p, ctypes.c_uint64,
                                                       ctypes.c_void_p, ctypes.c_char_p,
                                                       ctypes.c_size_t]

    def call(self, name, *args):
        err = ctypes.create_string_buffer(ERR)
        rc = getattr(self.lib, name)(*args, err, ERR)
        if rc != 0:
            raise RuntimeError("%s: %s" % (name, err.value.decode(errors="replace")))

    def code(self, side, codec, x, k, seed):
        n = x.size
        encoded = np.zeros(self.lib.tfps_checks_encoded_bytes(CODECS[codec], n, k), np.uint8)
        self.call("tfps_%s_encode" % side, CODECS[codec], x.ctypes.data, n, k, seed,
                  encoded.ctypes.data)
        return encoded

    def decode(self, side, codec, encoded, n, k, seed):
        out = np.full(n, 7.0, np.float32)  # decoding must overwrite all of it
        self.call("tfps_%s_decode" % side, CODECS[codec], encoded.ctypes.data, n, k, seed,
                  out.ctypes.data)
        return out


def codec_inputs(rng):
    yield "random 5000", rng.standard_normal(5000).astype(np.float32)
    yield "one element", np.array([-2.5], np.float32)
    yield "chunk edge 1024", rng.standard_normal(1024).astype(np.float32)
    yield "chunk edge 1025", rng.standard_normal(1025).astype(np.float32)
    ties = np.repeat(np.array([1.0, -1.0, 0.5, 2.0], np.float32), 700)
    yield "ties", ties
    zeros = np.zeros(3000, np.float32)
    zeros[::3] = -0.0
    zeros[5::7] = 1e-3
    yield "signed zeros", zeros
    tiny = (rng.standard_normal(4000) * 1e-42).astype(np.float32)  # subnormals
    yield "subnormals", tiny  # int8: 255 / (hi - lo) overflows to Inf, 0 * Inf is NaN
    wide = (rng.standard_normal(4000) * 1e5).astype(np.float32)
    wide[17] = 7e4  # fp16 overflow
    yield "wide range", wide
    bad = rng.standard_normal(4096).astype(np.float32)
    bad[10], bad[2000], bad[3000] = np.nan, np.inf, -np.inf
    yield "NaN and Inf", bad
    yield "large 1M", rng.standard_normal(1 << 20).astype(np.float32)


def sparse_k(ratio, n):
    return int(min(n, max(1, np.ceil(ratio * n))))


def check_codecs(lib, report):
    rng = np.random.default_rng(16)
    for label, x in codec_inputs(rng):
        for codec in CODECS:
            for ratio in ((0.01, 0.3) if codec in ("topk", "randomk") else (None,)):
                n = x.size
                k = sparse_k(ratio, n) if ratio else 0
                name = "codec %s%s on %s" % (codec, ":%g" % ratio if ratio else "", label)
                try:
                    cpu = lib.code("cpu", codec, x, k, seed=1234)
                    gpu = lib.code("gpu", codec, x, k, seed=1234)
                    if not np.array_equal(cpu, gpu):
                        first = int(np.flatnonzero(cpu != gpu)[0])
                        report(name, False, "encodings differ first at byte %d of %d"
                               % (first, cpu.size))
                        continue
                    d_cpu = lib.decode("cpu", codec, cpu, n, k, 1234)
                    d_gpu = lib.decode("gpu", codec, cpu, n, k, 1234)
                    same = np.array_equal(d_cpu.view(np.uint32), d_gpu.view(np.uint32))
                    report(name, same, "" if same else "decodings differ")
                except RuntimeError as e:
                    report(name, False, str(e))


def check_feedback(lib, report):
    """Five steps of error feedback (the residual on the GPU between steps, as a GPU
    push_pull keeps it): every step's bytes and the final residual equal the CPU's
    ErrorFeedback. NaN residuals are dropped to 0 on both, so the bits must match."""
    rng = np.random.default_rng(17)
    steps = 5
    for codec in ("onebit", "topk", "randomk", "int8", "fp16"):
        for n in (9, 1024, 3 * 1024 + 17, 1 << 18):
            x = (rng.standard_normal((steps, n)) * 3).astype(np.float32)
            if n > 1024 and codec not in ("topk", "randomk"):
                # A NaN's payload bits are not specified by IEEE adds (x86 keeps an
                # operand's, CUDA gives 0x7fffffff): topk/randomk carry p = e + g's NaN as
                # it is, so only the codecs that write a canonical NaN chunk get one here.
                x[2, 5] = np.nan
            k = sparse_k(0.05, n) if codec in ("topk", "randomk") else 0
            per = lib.lib.tfps_checks_encoded_bytes(CODECS[codec], n, k)
            name = "error feedback %s, %d elements, %d steps" % (codec, n, steps)
            try:
                got = {}
                for side in ("cpu", "gpu"):
                    out = np.zeros(per * steps, np.uint8)
                    e = np.zeros(n, np.float32)
                    lib.call("tfps_%s_encode_feedback" % side, CODECS[codec], x.ctypes.data, n,
                             k, steps, out.ctypes.data, e.ctypes.data)
                    got[side] = (out, e)
                same_bytes = np.array_equal(got["cpu"][0], got["gpu"][0])
                same_e = np.array_equal(got["cpu"][1].view(np.uint32),
                                        got["gpu"][1].view(np.uint32))
                report(name, same_bytes and same_e,
                       "" if same_bytes and same_e else
                       "bytes %s, residual %s" % ("equal" if same_bytes else "differ",
                                                  "equal" if same_e else "differs"))
            except RuntimeError as e:
                report(name, False, str(e))


def numpy_rebuild(rows, m, n, divisor):
    """rebuild.h's definition: G = G + outer(v_k, u_k), k in order, then / divisor."""
    g = np.zeros((n, m), rows.dtype)
    for k in range(rows.shape[0]):
        g = g + np.outer(rows[k, m:], rows[k, :m])
    return g / rows.dtype.type(divisor) if divisor != 1 else g


def check_sfb(lib, report):
    rng = np.random.default_rng(7)
    for dtype, fn in ((np.float32, "tfps_gpu_sfb_rebuild_f32"),
                      (np.float64, "tfps_gpu_sfb_rebuild_f64")):
        for (workers, k, m, n, divisor) in ((2, 16, 40, 70, 2), (3, 33, 128, 31, 3),
                                            (1, 1, 1, 1, 1), (4, 50, 257, 96, 4)):
            rows = rng.standard_normal((workers * k, m + n)).astype(dtype)
            g = np.zeros((n, m), dtype)
            name = "sfb rebuild %s %d workers x %d rows, %dx%d" % (
                np.dtype(dtype).name, workers, k, n, m)
            try:
                lib.call(fn, rows.ctypes.data, rows.shape[0], m, n, divisor, g.ctypes.data)
            except RuntimeError as e:
                report(name, False, str(e))
                continue
            want = numpy_rebuild(rows, m, n, divisor)
            bits = np.uint32 if dtype == np.float32 else np.uint64
            same = np.array_equal(g.view(bits), want.view(bits))
            report(name, same, "" if same else "max |diff| %g" % np.max(np.abs(g - want)))


def nccl_library():
    """libnccl.so.2 of an installed nvidia-nccl-cu12/-cu13 wheel, else the linker's."""
    for entry in sys.path:
        for found in glob.glob(os.path.join(entry, "nvidia", "nccl", "lib", "libnccl.so*")):
            return found
    return ""


def check_nccl(lib, report):
    path = nccl_library()
    err = ctypes.create_string_buffer(ERR)
    if lib.lib.tfps_gpu_nccl_load(path.encode(), err, ERR) != 0:
        report("nccl", None, "skipped: " + err.value.decode(errors="replace"))
        return
    x = np.arange(1 << 16, dtype=np.float32)
    out = np.zeros_like(x)
    try:
        lib.call("tfps_gpu_nccl_single_rank", x.ctypes.data, x.size, out.ctypes.data)
        report("nccl reduce+broadcast, one rank (NCCL %d)" % lib.lib.tfps_gpu_nccl_version(),
               np.array_equal(out, x), "")
    except RuntimeError as e:
        report("nccl reduce+broadcast, one rank", False, str(e))


def check_overlap(lib, report, results):
    out = (ctypes.c_double * 4)()
    layers, mb = 8, 16
    try:
        lib.call("tfps_gpu_staging_overlap", mb << 20, layers, 2000, out)
    except RuntimeError as e:
        report("staging overlap", False, str(e))
        return
    compute, copy, serial, overlapped = list(out)
    hidden = (serial - overlapped) / max(1e-9, min(compute, copy))
    results["staging_overlap"] = dict(layers=layers, mb_per_layer=mb, compute_ms=compute,
                                      copy_ms=copy, serial_ms=serial, overlapped_ms=overlapped,
                                      fraction_of_shorter_hidden=hidden)
    report("staging overlap (timed, not asserted): %d layers x %d MB: compute %.2f ms, copies "
           "%.2f ms, one stream %.2f ms, staging stream %.2f ms: %.0f%% of the shorter hidden"
           % (layers, mb, compute, copy, serial, overlapped, 100 * hidden), True, "")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", default=os.path.join(ROOT, "build", "native",
                                                      "_tfps_gpu_checks.so"))
    parser.add_argument("--json", help="write the measurements here")
    args = parser.parse_args()
    lib = Lib(args.lib)
    if lib.lib.tfps_gpu_device_count() < 1:
        print("FAIL: no CUDA device visible (nvidia-smi? CUDA_VISIBLE_DEVICES?)")
        return 1
    outcome = {"pass": 0, "fail": 0, "skip": 0}
    results = {}

    def report(name, ok, detail):
        key = "skip" if ok is None else ("pass" if ok else "fail")
        outcome[key] += 1
        print("%s  %s%s" % (key.upper(), name, (": " + detail) if detail else ""), flush=True)

    start = time.time()
    check_codecs(lib, report)
    check_feedback(lib, report)
    check_sfb(lib, report)
    check_nccl(lib, report)
    check_overlap(lib, report, results)
    print("gpu_checks: %d passed, %d failed, %d skipped in %.1f s"
          % (outcome["pass"], outcome["fail"], outcome["skip"], time.time() - start))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if outcome["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())

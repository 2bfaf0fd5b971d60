"""NumPy models of the codecs in tf_ps_ops/cc/codec (docs/compression.md), written from the
format description, not from the C++: the unit tests hold the core to them, and the
multi-process tests use them to predict what a compressed push_pull returns.

encode(name, x, k, seed) -> bytes (uint8 array); decode(name, data, n, k, seed) -> float32.
"""

import math

import ml_dtypes
import numpy as np

CHUNK = 1024
MASK64 = (1 << 64) - 1
LOSSY_WITH_FEEDBACK = ("onebit", "topk", "randomk")


def sparse_k(ratio, n):
    if n == 0:
        return 0
    return int(min(n, max(1, math.ceil(ratio * n))))


def _chunks(x):
    return [x[i:i + CHUNK] for i in range(0, x.size, CHUNK)]


def _f32(v):
    return np.asarray(v, np.float32)


def _int8_encode(x):
    heads, bodies = [], []
    for c in _chunks(x):
        if not np.all(np.isfinite(c)):
            lo = hi = np.float32(np.nan)
            q = np.zeros(c.size, np.uint8)
        else:
            lo, hi = c.min(), c.max()
            inv = np.float32(255) / (hi - lo) if hi > lo else np.float32(0)
            v = np.minimum((c - lo) * inv + np.float32(0.5), np.float32(255))
            q = v.astype(np.int32).astype(np.uint8)
        heads.append(np.array([lo, hi], np.float32))
        bodies.append(q)
    return np.concatenate([h.view(np.uint8) for h in heads] + bodies) if heads else \
        np.zeros(0, np.uint8)


def _int8_decode(data, n):
    chunks = -(-n // CHUNK)
    heads = data[:8 * chunks].view(np.float32).reshape(chunks, 2)
    q = data[8 * chunks:].astype(np.float32)
    out = np.empty(n, np.float32)
    for i in range(chunks):
        lo, hi = heads[i]
        step = (hi - lo) / np.float32(255)
        s = slice(i * CHUNK, min(n, (i + 1) * CHUNK))
        out[s] = lo + q[s] * step
    return out


def _onebit_encode(x):
    scales = [np.float32(np.abs(c).mean(dtype=np.float64)) if np.all(np.isfinite(c))
              else np.float32(np.nan) for c in _chunks(x)]
    bits = np.packbits(x < 0, bitorder="little")
    return np.concatenate([np.array(scales, np.float32).view(np.uint8), bits])


def _onebit_decode(data, n):
    chunks = -(-n // CHUNK)
    scales = data[:4 * chunks].view(np.float32)
    neg = np.unpackbits(data[4 * chunks:], bitorder="little")[:n].astype(bool)
    scale = np.repeat(scales, CHUNK)[:n]
    return np.where(neg, -scale, scale).astype(np.float32)


def topk_indices(x, k):
    """The k largest |x| (NaN above Inf), lowest index first among equals, ascending."""
    keys = x.view(np.uint32) & np.uint32(0x7FFFFFFF)
    order = np.lexsort((np.arange(x.size), -keys.astype(np.int64)))
    return np.sort(order[:k]).astype(np.uint32)


def _mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def randomk_seed(key, partition, step):
    return _mix64(key ^ _mix64(((partition << 40) ^ step) & MASK64))


def randomk_indices(n, k, seed):
    """Floyd's sampling with splitmix64, as the core does; ascending."""
    chosen, state = set(), seed
    for j in range(n - k, n):
        state = (state + 0x9E3779B97F4A7C15) & MASK64
        t = _mix64(state) % (j + 1)
        chosen.add(j if t in chosen else t)
    return np.array(sorted(chosen), np.uint32)


def encode(name, x, k=0, seed=0):
    x = np.ascontiguousarray(x, np.float32).ravel()
    if name == "none":
        return x.view(np.uint8).copy()
    if name == "fp16":
        return x.astype(np.float16).view(np.uint8)
    if name == "bf16":
        return x.astype(ml_dtypes.bfloat16).view(np.uint8)
    if name == "int8":
        return _int8_encode(x)
    if name == "onebit":
        return _onebit_encode(x)
    if name == "topk":
        idx = topk_indices(x, k)
        return np.concatenate([idx.view(np.uint8), x[idx].view(np.uint8)])
    if name == "randomk":
        return x[randomk_indices(x.size, k, seed)].view(np.uint8)
    raise ValueError(name)


def decode(name, data, n, k=0, seed=0):
    data = np.ascontiguousarray(data, np.uint8)
    if name == "none":
        return data.view(np.float32).copy()
    if name == "fp16":
        return data.view(np.float16).astype(np.float32)
    if name == "bf16":
        return data.view(ml_dtypes.bfloat16).astype(np.float32)
    if name == "int8":
        return _int8_decode(data, n)
    if name == "onebit":
        return _onebit_decode(data, n)
    out = np.zeros(n, np.float32)
    if name == "topk":
        out[data[:4 * k].view(np.uint32)] = data[4 * k:].view(np.float32)
        return out
    if name == "randomk":
        out[randomk_indices(n, k, seed)] = data.view(np.float32)
        return out
    raise ValueError(name)


def round_trip(name, x, k=0, seed=0):
    return decode(name, encode(name, x, k, seed), np.asarray(x).size, k, seed)


class ErrorFeedbackModel:
    """p = g + e; send C(p); e <- p - D(C(p)), non-finite residuals dropped to 0."""

    def __init__(self):
        self.residual = {}

    def encode(self, slot, name, g, k=0, seed=0):
        g = np.asarray(g, np.float32).ravel()
        e = self.residual.get(slot)
        if name not in LOSSY_WITH_FEEDBACK:
            return encode(name, g, k, seed)
        p = g + e if e is not None and e.size == g.size else g.copy()
        data = encode(name, p, k, seed)
        with np.errstate(invalid="ignore"):
            r = p - decode(name, data, g.size, k, seed)
        self.residual[slot] = np.where(np.isfinite(r), r, np.float32(0)).astype(np.float32)
        return data


def onebit_scale_exact(chunk):
    """onebit's scale of one chunk as the C++ loops compute it, to the bit: |x| summed in
    float32 in 8 lanes (lane j: x[j], x[j+8], ... in order; a partial chunk's last < 8
    values into lane 0), then lanes 0..7 in turn, divided by the length; NaN for a chunk
    holding NaN or Inf. (_onebit_encode's float64 mean is within 1e-6 of it.)"""
    x = np.abs(np.asarray(chunk, np.float32))
    if not np.all(np.isfinite(x)):
        return np.float32(np.nan)
    full = x.size // 8 * 8
    lanes = np.zeros(8, np.float32)
    for row in x[:full].reshape(-1, 8):
        lanes = (lanes + row).astype(np.float32)
    for v in x[full:]:
        lanes[0] = np.float32(lanes[0] + v)
    total = np.float32(0)
    for v in lanes:
        total = np.float32(total + v)
    return np.float32(total / np.float32(x.size))


def onebit_encode_exact(x):
    """onebit's bytes exactly as the C++ encoder writes them (onebit_scale_exact)."""
    x = np.asarray(x, np.float32)
    scales = np.array([onebit_scale_exact(c) for c in _chunks(x)], np.float32)
    return np.concatenate([scales.view(np.uint8), np.packbits(x < 0, bitorder="little")])

"""Gradient compression applied around push_pull, with Horovod's Compressor interface.

A compressor's `compress(tensor)` returns `(tensor_to_send, context)`; `decompress`
turns the summed result back using that context. Users may pass their own classes.
"""

import tensorflow as tf


class Compressor:
    """Interface: compress before push_pull, decompress after."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16 (half the bytes of float32).

    The servers sum in float16, so sums beyond float16's range (65504) overflow, as in
    Horovod. Integer tensors are sent unchanged.
    """

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class Compression:
    """The built-in compressors: `Compression.none` and `Compression.fp16`."""

    none = NoneCompressor
    fp16 = FP16Compressor

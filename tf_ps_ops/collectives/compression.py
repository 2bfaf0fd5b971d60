"""Gradient compression for push_pull, with Horovod's Compressor interface.

A compressor's `compress(tensor)` returns `(tensor_to_send, context)`; `decompress` turns
the summed result back using that context. Users may pass their own classes.

The built-in codecs (`Compression.fp16`, `bf16`, `int8`, `onebit`, `topk`, `randomk`) run
in the C++ core, per partition: the worker encodes, the server decodes, sums in float32
and re-encodes the sum, the worker decodes (docs/compression.md). They apply to float32
tensors; other floating tensors are cast to float32 around the push_pull, integers travel
unchanged. `Compression.none` leaves the choice to the job default, TFPS_COMPRESSION.
"""

import math
import re

import tensorflow as tf


class Compressor:
    """Interface: compress before push_pull, decompress after.

    `wire` names the core codec the push_pull op applies ("" = the job default,
    TFPS_COMPRESSION) and `error_feedback` whether onebit/topk/randomk carry what they did
    not send to the next call (1, 0, or -1 = TFPS_ERROR_FEEDBACK).
    """

    wire = ""
    error_feedback = -1

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are, or as TFPS_COMPRESSION says when it is set."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Casts floating-point tensors to float16 in TensorFlow before push_pull (Horovod's).

    The servers then sum in float16, so sums beyond float16's range (65504) overflow.
    `Compression.fp16` (the core codec, summed in float32) is usually the better choice.
    """

    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


_WIRE_NAME = re.compile(r"^(none|fp16|bf16|int8|onebit)$|^(topk|randomk):(.+)$")


def _check_wire(wire):
    match = _WIRE_NAME.match(wire)
    if match and match.group(3) is not None:
        try:
            ratio = float(match.group(3))
        except ValueError:
            ratio = math.nan
        if not 2 ** -16 <= ratio <= 1:
            raise ValueError(f"compression {wire!r}: the ratio must be in [1/65536, 1]")
    elif not match:
        raise ValueError(f"compression {wire!r} is not one of none, fp16, bf16, int8, "
                         "onebit, topk:R, randomk:R")
    return wire


class CoreCodec(Compressor):
    """A codec of the C++ core, applied by the push_pull op itself (`wire`, e.g. "int8").

    compress() only brings floating tensors to float32 (the codecs' input); the encoding
    happens per partition in the engine.
    """

    def __init__(self, wire, error_feedback=-1):
        self.wire = _check_wire(wire)
        self.error_feedback = int(error_feedback)

    def compress(self, tensor):
        if tensor.dtype.is_floating and tensor.dtype != tf.float32:
            return tf.cast(tensor, tf.float32), tensor.dtype
        return tensor, None

    def decompress(self, tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)

    def with_error_feedback(self, enabled=True):
        """The same codec with error feedback on (True) or off (False)."""
        return CoreCodec(self.wire, 1 if enabled else 0)

    def __eq__(self, other):
        return isinstance(other, CoreCodec) and (self.wire, self.error_feedback) == (
            other.wire, other.error_feedback)

    def __hash__(self):
        return hash((self.wire, self.error_feedback))

    def __repr__(self):
        return f"CoreCodec({self.wire!r}, error_feedback={self.error_feedback})"


class HorovodFP16Codec(CoreCodec):
    """`Compression.fp16`: Horovod's interface and the core's fp16 codec at once.

    Called directly, as Horovod code and tests do, `compress()` casts floating tensors to
    float16 and `decompress()` casts back (integers pass unchanged), exactly as Horovod's
    FP16Compressor. Passed to allreduce / DistributedOptimizer / the tape, the op encodes
    to fp16 per partition itself and the servers sum in float32 (wire_compress: the tensor
    only goes to float32), which is what keeps large sums from overflowing.
    """

    def __init__(self, error_feedback=-1):
        super().__init__("fp16", error_feedback)

    def compress(self, tensor):
        tensor = tf.convert_to_tensor(tensor)
        if tensor.dtype.is_floating and tensor.dtype != tf.float16:
            return tf.cast(tensor, tf.float16), tensor.dtype
        return tensor, None

    def decompress(self, tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)

    wire_compress = CoreCodec.compress
    wire_decompress = CoreCodec.decompress

    def with_error_feedback(self, enabled=True):
        return HorovodFP16Codec(1 if enabled else 0)


def wire_compress(compressor, tensor):
    """What the push_pull op takes: for the core codecs the tensor brought to their input
    (wire_compress), for any other compressor its own compress()."""
    return getattr(compressor, "wire_compress", compressor.compress)(tensor)


def wire_decompress(compressor, tensor, ctx):
    return getattr(compressor, "wire_decompress", compressor.decompress)(tensor, ctx)


class SparseCodec(CoreCodec):
    """topk / randomk: `Compression.topk` keeps 1%; `Compression.topk(0.1)` keeps 10%."""

    def __init__(self, name, ratio, error_feedback=-1):
        super().__init__(f"{name}:{ratio!r}", error_feedback)
        self.name, self.ratio = name, ratio

    def __call__(self, ratio):
        return SparseCodec(self.name, ratio, self.error_feedback)

    def with_error_feedback(self, enabled=True):
        return SparseCodec(self.name, self.ratio, 1 if enabled else 0)


class Compression:
    """The built-in compressors.

    none      the job default (TFPS_COMPRESSION; unset: uncompressed)
    uncompressed  never compressed, whatever TFPS_COMPRESSION says
    fp16, bf16    2 bytes per element, summed in float32 on the servers (fp16.compress()
                  called directly is Horovod's float16 cast)
    int8      1 byte per element + min/max per 1024 (Bagua's 8-bit gradients)
    onebit    1 bit per element + a scale per 1024, with error feedback
    topk, randomk  a fraction of the elements (topk(0.01)), with error feedback
    """

    none = NoneCompressor
    uncompressed = CoreCodec("none")
    fp16 = HorovodFP16Codec()
    bf16 = CoreCodec("bf16")
    int8 = CoreCodec("int8")
    onebit = CoreCodec("onebit")
    topk = SparseCodec("topk", 0.01)
    randomk = SparseCodec("randomk", 0.01)
    tf_fp16 = FP16Compressor  # Horovod's cast-in-TensorFlow fp16

    @staticmethod
    def parse(text):
        """A compressor from a name as TFPS_COMPRESSION takes it: "int8", "topk:0.01"."""
        _check_wire(text)
        return CoreCodec(text)


def wire_codec(compressor):
    """(codec name, error feedback) that the push_pull op takes for `compressor`."""
    return getattr(compressor, "wire", ""), getattr(compressor, "error_feedback", -1)

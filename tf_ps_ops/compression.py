"""Gradient compression, as Horovod's `hvd.Compression` (tf_ps_ops/collectives/compression.py;
docs/compression.md)."""

from tf_ps_ops.collectives.compression import (  # noqa: F401
    Compression, Compressor, CoreCodec, FP16Compressor, HorovodFP16Codec, NoneCompressor,
    SparseCodec, wire_codec, wire_compress, wire_decompress)

__all__ = ["Compression", "Compressor", "CoreCodec", "FP16Compressor", "HorovodFP16Codec",
           "NoneCompressor", "SparseCodec", "wire_codec", "wire_compress", "wire_decompress"]

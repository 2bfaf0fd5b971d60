"""Loads the op library once: its TF ops and, from the same loaded image, its C functions.

Everything else in the package imports the library from here. Loading is deferred to
the first use so that `import tf_ps_ops` (and the launcher in the same package) works
before `make build` and without paying for the library's static initialisers.
"""

import ctypes
import functools
import json
import os
import re

import tensorflow as tf

from tf_ps_ops.common.version import BUILD_HINT

# The package folder: the op library and its headers are package data of tf_ps_ops.
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRARY_PATH = os.path.join(_HERE, "_tf_ps_ops.so")
BUILD_INFO_PATH = os.path.join(_HERE, "_build_info.json")

REBUILD_HINT = (
    "Rebuild tf_ps_ops against the TensorFlow you run: from a checkout, `make build` (or "
    "`python3 setup.py build_tfps`); for an installed package, `pip install "
    "--no-build-isolation --force-reinstall --no-deps <checkout or sdist>` (with pybind11 and "
    "setuptools>=77 installed), which compiles against the TensorFlow installed in that "
    "environment (any of 2.16 to 2.21); a plain `pip install` compiles against the newest.")


class TensorFlowVersionError(ImportError):
    """The op library was compiled against another TensorFlow than the one running."""

# The headers that declare the library's C functions: their one declaration, read here
# to give ctypes the signatures (the compiler checks the definitions against them).
C_HEADERS = (os.path.join(_HERE, "cc", "engine", "c_api.h"),
             os.path.join(_HERE, "kernels", "c_api.h"))

_C_TYPES = {"void": None, "int": ctypes.c_int, "unsigned long long": ctypes.c_ulonglong,
            "const char*": ctypes.c_char_p, "char*": ctypes.c_char_p,
            "long long": ctypes.c_longlong, "long long*": ctypes.POINTER(ctypes.c_longlong)}
# A declaration: return type, name, parameters, ";" (comments stripped, may span lines).
_DECLARATION = re.compile(r"([A-Za-z_][\w ]*?\s*\*?)\s*\b(tfps_\w+)\s*\(([^)]*)\)\s*;")
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def _c_type(text, header):
    text = " ".join(text.replace("*", " * ").split()).replace(" *", "*")
    if text not in _C_TYPES:
        raise RuntimeError(f"{header}: the C type {text!r} is not one tf_ps_ops/common/library.py "
                           f"knows ({', '.join(_C_TYPES)})")
    return _C_TYPES[text]


def c_declarations(headers=C_HEADERS):
    """(name, restype, argtypes) of every tfps_* function the headers declare."""
    out = []
    for header in headers:
        with open(header) as f:
            text = _COMMENT.sub(" ", f.read())
        for restype, name, args in _DECLARATION.findall(text):
            params = [] if args.strip() in ("", "void") else args.split(",")
            # Each parameter is "type name": drop the name, keep the type.
            argtypes = [_c_type(re.sub(r"\w+$", "", p.strip()), header) for p in params]
            out.append((name, _c_type(restype.strip(), header), argtypes))
    return out


def _check_built():
    if not os.path.exists(LIBRARY_PATH):
        raise RuntimeError(
            f"the tf_ps_ops op library {LIBRARY_PATH} is missing: {BUILD_HINT}")


def built_against():
    """The TensorFlow version the op library was compiled against (tools/native_build.py
    records it), or None for a build that predates the record."""
    try:
        with open(BUILD_INFO_PATH) as f:
            return json.load(f)["tensorflow"]
    except FileNotFoundError:
        return None


def _minor(version):
    return tuple(version.split(".")[:2])


def check_tensorflow_version(built, running):
    """Raises TensorFlowVersionError unless `built` and `running` share major.minor.

    TensorFlow keeps its C++ ABI within a minor release only; across minors a custom op
    library fails to load with an undefined symbol, or worse, loads and misbehaves. The
    package builds against any TensorFlow in 2.16-2.21 (requirements.txt), one at a time.
    """
    if built is not None and _minor(built) != _minor(running):
        raise TensorFlowVersionError(
            f"tf_ps_ops was compiled against TensorFlow {built}, but this process runs "
            f"TensorFlow {running}: its op library would not load. " + REBUILD_HINT +
            f" Or run the TensorFlow it was built for: `pip install "
            f"'tensorflow=={'.'.join(_minor(built))}.*'`.")


@functools.cache
def ops():
    """The module of TF op wrappers (`ps_push_pull`, `ps_broadcast`, `ps_rank`, ...)."""
    _check_built()
    check_tensorflow_version(built_against(), tf.__version__)
    try:
        return tf.load_op_library(LIBRARY_PATH)
    except tf.errors.NotFoundError as e:  # how TF reports a dlopen failure
        if "undefined symbol" not in e.message:
            raise  # e.g. libzmq.so.5 missing: its own message says so
        raise TensorFlowVersionError(
            f"loading the tf_ps_ops op library {LIBRARY_PATH} into TensorFlow "
            f"{tf.__version__} failed ({e.message.strip()}). " + REBUILD_HINT) from e


@functools.cache
def c_api():
    """The library's C functions, with their signatures declared for ctypes.

    TF loads the library first: it resolves libtensorflow_framework for it, and dlopen
    of the same path then returns that same image, so the C functions and the kernels
    share one engine.
    """
    ops()
    lib = ctypes.CDLL(LIBRARY_PATH)
    for name, restype, argtypes in c_declarations():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    return lib

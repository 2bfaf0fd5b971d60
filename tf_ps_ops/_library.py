"""Loads the op library once: its TF ops and, from the same loaded image, its C functions.

Everything else in the package imports the library from here. Loading is deferred to
the first use so that `import tf_ps_ops` (and the launcher in the same package) works
before `make build` and without paying for the library's static initialisers.
"""

import ctypes
import functools
import os

import tensorflow as tf

LIBRARY_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_tf_ps_ops.so")

# (name, restype, argtypes) of the C functions, as declared in docs/internals.md.
_C_FUNCTIONS = (
    ("tfps_init", ctypes.c_int,
     [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
      ctypes.c_char_p, ctypes.c_int]),
    ("tfps_shutdown", None, []),
    ("tfps_is_initialized", ctypes.c_int, []),
    ("tfps_rank", ctypes.c_int, []),
    ("tfps_size", ctypes.c_int, []),
    ("tfps_local_rank", ctypes.c_int, []),
    ("tfps_local_size", ctypes.c_int, []),
    ("tfps_num_servers", ctypes.c_int, []),
)


def _check_built():
    if not os.path.exists(LIBRARY_PATH):
        raise RuntimeError(
            f"the tf_ps_ops op library {LIBRARY_PATH} is missing: run `make build` "
            "(or `python3 setup.py build_tfps`) in the source tree first")


@functools.cache
def ops():
    """The module of TF op wrappers (`ps_push_pull`, `ps_broadcast`, `ps_rank`, ...)."""
    _check_built()
    return tf.load_op_library(LIBRARY_PATH)


@functools.cache
def c_api():
    """The library's C functions, with their signatures declared for ctypes.

    TF loads the library first: it resolves libtensorflow_framework for it, and dlopen
    of the same path then returns that same image, so the C functions and the kernels
    share one engine.
    """
    ops()
    lib = ctypes.CDLL(LIBRARY_PATH)
    for name, restype, argtypes in _C_FUNCTIONS:
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    return lib

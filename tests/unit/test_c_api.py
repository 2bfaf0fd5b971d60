"""The op library's C functions are declared once, in C headers (cc/engine/c_api.h,
kernels/c_api.h); tf_ps_ops/common/library.py gives ctypes their signatures from those headers.
Checked here: every declared function is exported, callable before init(), and a type the
reader does not know is refused rather than guessed."""

import ctypes
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

pytest.importorskip("tensorflow")

from cluster import require_build  # noqa: E402
from tf_ps_ops.common import library as _library  # noqa: E402


def test_the_headers_declare_what_python_calls():
    declared = {name: (restype, argtypes) for name, restype, argtypes in
                _library.c_declarations()}
    assert declared["tfps_init"] == (ctypes.c_int, [ctypes.c_char_p] + [ctypes.c_int] * 4
                                     + [ctypes.c_char_p, ctypes.c_int])
    assert declared["tfps_bytes_sent"] == (ctypes.c_ulonglong, [])
    assert declared["tfps_shutdown"] == (None, [])
    assert {"tfps_rank", "tfps_size", "tfps_ps_swap_table", "tfps_ps_key_prefix"} <= set(declared)


def test_every_declared_function_is_exported_and_typed():
    require_build()
    lib = _library.c_api()
    for name, restype, argtypes in _library.c_declarations():
        function = getattr(lib, name)  # AttributeError if the library lacks it
        assert function.restype == restype and function.argtypes == argtypes, name
    assert lib.tfps_is_initialized() == 0
    assert lib.tfps_ps_key_prefix() == b"ps:"


def test_an_unknown_c_type_is_refused(tmp_path):
    header = tmp_path / "api.h"
    header.write_text("/* a comment: int tfps_not_this(void); */\n"
                      "double tfps_ratio(int a,\n                  int b);\n")
    with pytest.raises(RuntimeError, match="double"):
        _library.c_declarations([str(header)])

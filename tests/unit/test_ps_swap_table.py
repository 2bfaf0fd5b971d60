"""PS mode's swap table (stock op -> PsApplyXXX op) is written twice: in Python for
`enable_graph_rewrite`/`rewrite_graph_def` (tf_ps_ops/ps_mode.py, SWAPS) and in C++ for the
Grappler optimizer (tf_ps_ops/kernels/ps_rewrite_optimizer.cc, Swaps()). Both must agree.

Both tables are read from the source text: importing ps_mode would import TensorFlow and
load the op library, seconds for a check of two literals.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PS_MODE = ROOT / "tf_ps_ops" / "ps_mode.py"
OPTIMIZER = ROOT / "tf_ps_ops" / "kernels" / "ps_rewrite_optimizer.cc"
OP_DEFS = ROOT / "tf_ps_ops" / "kernels" / "ps_apply_op_defs.cc"

# Entries today. A floor, not the exact count: fewer found means a parser below broke.
MIN_ENTRIES = 15

_CPP_TABLE = re.compile(r"new std::map<std::string, std::string>\{(?P<body>.*?)\};", re.S)
_CPP_ENTRY = re.compile(r'\{\s*"(\w+)"\s*,\s*"(\w+)"\s*\}')


def python_swaps():
    """SWAPS from ps_mode.py, as (stock op, PS op) pairs in source order."""
    tree = ast.parse(PS_MODE.read_text(), str(PS_MODE))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "SWAPS" for target in node.targets):
            assert isinstance(node.value, ast.Dict), "SWAPS is no longer a dict literal"
            # literal_eval of the pairs, not of the dict: a duplicated key must not vanish.
            return [(ast.literal_eval(key), ast.literal_eval(value))
                    for key, value in zip(node.value.keys, node.value.values)]
    raise AssertionError(f"no `SWAPS = {{...}}` in {PS_MODE}")


def cpp_swaps():
    """Swaps() from ps_rewrite_optimizer.cc, as (stock op, PS op) pairs in source order."""
    source = OPTIMIZER.read_text()
    tables = _CPP_TABLE.findall(source)
    assert len(tables) == 1, (
        f"expected one `new std::map<std::string, std::string>{{...}};` in {OPTIMIZER}, "
        f"found {len(tables)}")
    body = re.sub(r"//[^\n]*", "", tables[0])
    # Whatever the entry pattern does not match must be separators only, so an entry
    # written another way fails here instead of going missing.
    leftover = _CPP_ENTRY.sub("", body).replace(",", "").split()
    assert not leftover, f"Swaps() holds text the test cannot parse: {' '.join(leftover)!r}"
    return _CPP_ENTRY.findall(body)


def _duplicates(pairs):
    stock = [tf_op for tf_op, _ in pairs]
    return sorted({op for op in stock if stock.count(op) > 1})


def _difference(python, cpp):
    lines = [f"only in ps_mode.py SWAPS: {op} -> {python[op]}"
             for op in sorted(python.keys() - cpp.keys())]
    lines += [f"only in ps_rewrite_optimizer.cc Swaps(): {op} -> {cpp[op]}"
              for op in sorted(cpp.keys() - python.keys())]
    lines += [f"{op}: ps_mode.py says {python[op]}, ps_rewrite_optimizer.cc says {cpp[op]}"
              for op in sorted(python.keys() & cpp.keys()) if python[op] != cpp[op]]
    return lines


def test_both_tables_are_read_whole():
    for name, pairs in (("ps_mode.py", python_swaps()), ("ps_rewrite_optimizer.cc", cpp_swaps())):
        assert len(pairs) >= MIN_ENTRIES, f"{name}: found only {len(pairs)} entries: {pairs}"
        assert not _duplicates(pairs), f"{name}: stock ops listed twice: {_duplicates(pairs)}"


def test_python_and_cpp_tables_agree():
    difference = _difference(dict(python_swaps()), dict(cpp_swaps()))
    assert not difference, "the two swap tables differ:\n  " + "\n  ".join(difference)


def test_every_swap_target_is_a_registered_op():
    registered = set(re.findall(r'(?:REGISTER_OP|TFPS_PS_OP|TFPS_PS_SPARSE_OP)\("(\w+)"\)',
                                OP_DEFS.read_text()))
    missing = sorted({ps_op for _, ps_op in python_swaps() + cpp_swaps()} - registered)
    assert not missing, f"swapped to, but not defined in {OP_DEFS.name}: {missing}"

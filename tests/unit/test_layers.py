"""The layers of the native code (tools/native_build.py's UNITS table, docs/bazel.md): the
build refuses an include that points the wrong way, before compiling anything."""

import importlib.util
import os
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def native_build():
    spec = importlib.util.spec_from_file_location(
        "native_build", os.path.join(ROOT, "tools", "native_build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_tree_as_it_is_keeps_to_the_layers(native_build):
    native_build.check_layers()  # raises with every violation


def test_the_table_is_closed_and_points_downwards(native_build):
    names = list(native_build.UNITS)
    for index, (unit, (folders, deps)) in enumerate(native_build.UNITS.items()):
        for dep in deps:
            assert names.index(dep) < index, f"{unit} depends on {dep}, listed after it"
            missing = set(native_build.UNITS[dep][1]) - set(deps)
            assert not missing, f"{unit} may use {dep} but not what {dep} uses: {missing}"
    assert "engine" not in native_build.UNITS["server"][1]
    assert "server" not in native_build.UNITS["pybind"][1]
    assert set(native_build.UNITS["server"][1]) == set(native_build.BASE)


def copy_unit_tree(tmp_path, folders):
    for folder in folders:
        shutil.copytree(os.path.join(ROOT, folder), tmp_path / folder,
                        ignore=shutil.ignore_patterns("*.so", "__pycache__"))


def test_a_server_file_that_includes_the_engine_is_refused(native_build, tmp_path):
    # A copy of the tree with one wrong include; the checkout itself is never touched.
    copy_unit_tree(tmp_path, ["ps_server", "tf_ps_ops/cc"])
    header = tmp_path / "ps_server" / "shard_server.h"
    text = header.read_text()
    header.write_text(text.replace('#include "tf_ps_ops/cc/common/config.h"',
                                   '#include "tf_ps_ops/cc/common/config.h"\n'
                                   '#include "tf_ps_ops/cc/engine/engine.h"', 1))
    files = {unit: [str(p) for folder in native_build.UNITS[unit][0]
                    for p in sorted((tmp_path / folder).glob("*.[ch]*"))]
             for unit in ("server", "engine", "cluster")}
    problems = native_build.layer_violations(files, root=str(tmp_path))
    assert [(f, i) for f, i, _ in problems] == [
        ("ps_server/shard_server.h", "tf_ps_ops/cc/engine/engine.h")]
    assert problems[0][2] == (
        "ps_server/shard_server.h includes tf_ps_ops/cc/engine/engine.h (unit engine), but "
        "server may depend only on common, codec, wire, transport, cluster")


def test_the_core_binding_may_not_include_the_server(native_build, tmp_path):
    copy_unit_tree(tmp_path, ["ps_server", "tf_ps_ops/cc"])
    module = tmp_path / "tf_ps_ops" / "cc" / "pybind" / "core_module.cc"
    module.write_text('#include "ps_server/key_store.h"\n' + module.read_text())
    problems = native_build.layer_violations({"pybind": [str(module)]}, root=str(tmp_path))
    assert len(problems) == 1 and "but pybind may depend only on" in problems[0][2]
    assert "(unit server)" in problems[0][2]


def test_a_header_of_no_unit_is_refused_too(native_build, tmp_path):
    (tmp_path / "stray").mkdir()
    (tmp_path / "stray" / "thing.h").write_text("// nothing\n")
    copy_unit_tree(tmp_path, ["tf_ps_ops/cc/common"])
    source = tmp_path / "tf_ps_ops" / "cc" / "common" / "config.cc"
    source.write_text('#include "stray/thing.h"\n' + source.read_text())
    problems = native_build.layer_violations({"common": [str(source)]}, root=str(tmp_path))
    assert len(problems) == 1 and "(a folder of no unit)" in problems[0][2]


def test_the_build_stops_before_compiling(native_build, monkeypatch):
    monkeypatch.setattr(native_build, "layer_violations",
                        lambda files: [("a.cc", "b.h", "a.cc includes b.h, but ...")])
    with pytest.raises(RuntimeError, match="layering .*\n  a.cc includes b.h"):
        native_build.check_layers()

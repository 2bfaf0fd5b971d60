"""The Bazel build (BUILD, WORKSPACE, docs/bazel.md) makes the artifacts the in-place build makes.

Building takes minutes, so the Bazel tests run only when asked: `bazel` on PATH and
TFPS_TEST_BAZEL=1, e.g. `TFPS_TEST_BAZEL=1 python3 -m pytest -q tests/unit/test_bazel_build.py`.
Two checks run always, since they only read two files: BUILD holds the layer table of
tools/native_build.py (each unit's folders and the units it may depend on), so the two
builds cannot drift apart.
"""

import ast
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BAZEL_BIN = os.path.join(ROOT, "bazel-bin")
TARGETS = ["//:ps_server", "//:_tf_ps_ops.so", "//:pybind_core", "//:pybind_server_testing"]
BUILD_TIMEOUT_S = 1800  # a cold build on 2 shared cores took under 2 minutes (docs/bazel.md)

requires_bazel = pytest.mark.skipif(
    shutil.which("bazel") is None or os.environ.get("TFPS_TEST_BAZEL") != "1",
    reason="the Bazel build takes minutes: set TFPS_TEST_BAZEL=1 with bazel on PATH")


def load_native_build():
    spec = importlib.util.spec_from_file_location(
        "native_build", os.path.join(ROOT, "tools", "native_build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_file_tables():
    """BUILD's top-level data assignments (`NAME = [...]`, `{...}`, `BASE + [...]`),
    evaluated as Python: Starlark's literals parse and evaluate the same."""
    with open(os.path.join(ROOT, "BUILD")) as f:
        tree = ast.parse(f.read())
    data = (ast.List, ast.Tuple, ast.Dict, ast.Constant, ast.Name, ast.BinOp, ast.Add,
            ast.Load)
    tables = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and all(isinstance(n, data) for n in ast.walk(node.value))):
            expression = ast.Expression(node.value)
            tables[node.targets[0].id] = eval(compile(expression, "BUILD", "eval"),
                                              {"__builtins__": {}}, dict(tables))
    return tables


def test_build_has_the_layer_table_native_build_has():
    # The units (folders globbed) and their deps (include and link rules) are one table in
    # two files; a new folder or arrow needs an edit in both, and this fails until they agree.
    native, bazel = load_native_build(), build_file_tables()
    for name in ("BASE", "UNITS", "SERVER_MAIN"):
        assert bazel.get(name) == getattr(native, name), (
            f"BUILD's {name} differs from tools/native_build.py's")


def test_every_library_of_build_is_a_unit():
    with open(os.path.join(ROOT, "BUILD")) as f:
        text = f.read()
    native = load_native_build()
    for unit in ("common", "wire", "transport", "cluster", "engine", "server"):
        assert f'"{unit}",' in text and unit in native.UNITS


def bazel_env():
    # The repository rules ask this interpreter (a virtualenv's, say) for TF and pybind11.
    return dict(os.environ, PYTHON_BIN_PATH=sys.executable)


@pytest.fixture(scope="module")
def bazel_bin():
    # --batch: no Bazel server is left running (and holding memory) after the test.
    cmd = ["bazel", "--batch", "build"] + TARGETS
    try:
        result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                timeout=BUILD_TIMEOUT_S, env=bazel_env())
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(cmd)} ran past {BUILD_TIMEOUT_S} s:\n{e.stderr}")
    assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{result.stderr[-8000:]}"
    return BAZEL_BIN


def module_path(bazel_bin, name="_core"):
    names = [n for n in os.listdir(bazel_bin) if n.startswith(name + ".") and n.endswith(".so")]
    assert len(names) == 1, f"expected one {name}*.so in {bazel_bin}, found {names}"
    return os.path.join(bazel_bin, names[0])


@requires_bazel
def test_outputs_exist(bazel_bin):
    assert os.access(os.path.join(bazel_bin, "ps_server"), os.X_OK)
    assert os.path.isfile(os.path.join(bazel_bin, "_tf_ps_ops.so"))
    assert os.path.isfile(module_path(bazel_bin))


@requires_bazel
def test_ps_server_links_zmq_but_not_tensorflow(bazel_bin):
    ldd = subprocess.run(["ldd", os.path.join(bazel_bin, "ps_server")],
                         capture_output=True, text=True, check=True).stdout
    assert "libzmq" in ldd
    assert "tensorflow" not in ldd, ldd


@requires_bazel
def test_ps_server_binds_and_stops_on_sigterm(bazel_bin, tmp_path):
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [os.path.join(bazel_bin, "ps_server"), "--role", "scheduler", "--port", "0",
         "--port-file", str(port_file), "--num-workers", "1", "--num-servers", "1",
         "--bind", "127.0.0.1"],  # a keyless bind beyond loopback is refused (docs/security.md)
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert proc.poll() is None, f"ps_server exited early: {proc.communicate()}"
            assert time.monotonic() < deadline, "ps_server wrote no port file in 30 s"
            time.sleep(0.05)
        assert 0 < int(port_file.read_text()) < 65536
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@requires_bazel
def test_op_library_loads_in_tensorflow(bazel_bin):
    # A child process: importing TensorFlow here would slow every later unit test.
    script = ("import sys, tensorflow as tf\n"
              "ops = tf.load_op_library(sys.argv[1])\n"
              "print(' '.join(n for n in dir(ops) if n.startswith('ps_')))\n")
    result = subprocess.run(
        [sys.executable, "-c", script, os.path.join(bazel_bin, "_tf_ps_ops.so")],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.returncode == 0, result.stderr[-4000:]
    names = result.stdout.split()
    for op in ("ps_push_pull", "ps_broadcast", "ps_rank", "ps_size"):
        assert op in names, names


def module_names(path, name):
    # A child process: the in-place module may already be loaded here, and pybind11 refuses
    # to register the same C++ types twice in one process.
    script = ("import importlib.util, sys\n"
              "spec = importlib.util.spec_from_file_location(sys.argv[2], sys.argv[1])\n"
              "module = importlib.util.module_from_spec(spec)\n"
              "spec.loader.exec_module(module)\n"
              "print(' '.join(dir(module)))\n")
    result = subprocess.run([sys.executable, "-c", script, path, name],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout.split()


@requires_bazel
def test_pybind_core_imports(bazel_bin):
    names = module_names(module_path(bazel_bin), "_core")
    assert "push_pull" in names
    assert "KeyStore" not in names and "read_checkpoint" not in names  # server internals


@requires_bazel
def test_pybind_server_testing_imports(bazel_bin):
    names = module_names(module_path(bazel_bin, "_ps_server_testing"), "_ps_server_testing")
    for name in ("KeyStore", "read_checkpoint", "sum_into", "thread_of_partition"):
        assert name in names, names


@requires_bazel
def test_ps_server_holds_no_engine(bazel_bin):
    symbols = subprocess.run(["nm", "-C", os.path.join(bazel_bin, "ps_server")],
                             capture_output=True, text=True, check=True).stdout
    for name in ("tfps::Engine", "tfps::PeerMesh", "tfps::Timeline", "tfps_init"):
        assert name not in symbols, name


@requires_bazel
def test_a_wrong_include_fails_the_bazel_build(tmp_path):
    # In a copy of the workspace: the server's library cannot see the engine's headers.
    copy = tmp_path / "ws"
    shutil.copytree(ROOT, copy, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "bazel-*", "build", "*.so", "__pycache__", "bin", "*.egg-info"))
    header = copy / "ps_server" / "shard_server.h"
    header.write_text(header.read_text().replace(
        '#include "tf_ps_ops/cc/common/config.h"',
        '#include "tf_ps_ops/cc/common/config.h"\n#include "tf_ps_ops/cc/engine/engine.h"', 1))
    # Its own output base, under tmp_path: nothing is left in the user's Bazel cache.
    cmd = ["bazel", "--batch", "--output_base=" + str(tmp_path / "out"), "build", "//:server"]
    result = subprocess.run(cmd, cwd=copy, capture_output=True, text=True,
                            timeout=BUILD_TIMEOUT_S, env=bazel_env())
    assert result.returncode != 0, "the server built while including the engine"
    # The sandbox holds only the headers of the units the server depends on.
    assert "tf_ps_ops/cc/engine/engine.h: No such file or directory" in result.stderr, \
        result.stderr[-4000:]

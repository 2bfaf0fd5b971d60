"""The Bazel build (BUILD, WORKSPACE, docs/bazel.md) makes the artifacts the in-place build makes.

Building takes minutes, so the Bazel tests run only when asked: `bazel` on PATH and
TFPS_TEST_BAZEL=1, e.g. `TFPS_TEST_BAZEL=1 python3 -m pytest -q tests/unit/test_bazel_build.py`.
One check runs always, since it only reads two files: BUILD names the source folders that
tools/native_build.py compiles, so the two builds cannot drift apart.
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
TARGETS = ["//:ps_server", "//:_tf_ps_ops.so", "//:pybind_core"]
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


def build_file_lists():
    """The top-level `NAME = ["folder", ...]` lists of BUILD (Starlark parses as Python)."""
    with open(os.path.join(ROOT, "BUILD")) as f:
        tree = ast.parse(f.read())
    lists = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.List)):
            lists[node.targets[0].id] = [ast.literal_eval(e) for e in node.value.elts]
    return lists


def test_build_globs_the_folders_native_build_compiles():
    native, bazel = load_native_build(), build_file_lists()
    for name in ("CORE", "SERVER_LIB", "KERNELS", "PYBIND"):
        assert bazel.get(name) == getattr(native, name), (
            f"BUILD's {name} differs from tools/native_build.py's")


@pytest.fixture(scope="module")
def bazel_bin():
    # --batch: no Bazel server is left running (and holding memory) after the test.
    cmd = ["bazel", "--batch", "build"] + TARGETS
    try:
        # The repository rules ask this interpreter (a virtualenv's, under make) for
        # TensorFlow's and pybind11's paths, not whatever python3 is first on PATH.
        result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                timeout=BUILD_TIMEOUT_S,
                                env=dict(os.environ, PYTHON_BIN_PATH=sys.executable))
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(cmd)} ran past {BUILD_TIMEOUT_S} s:\n{e.stderr}")
    assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{result.stderr[-8000:]}"
    return BAZEL_BIN


def core_module_path(bazel_bin):
    names = [n for n in os.listdir(bazel_bin) if n.startswith("_core.") and n.endswith(".so")]
    assert len(names) == 1, f"expected one _core*.so in {bazel_bin}, found {names}"
    return os.path.join(bazel_bin, names[0])


@requires_bazel
def test_outputs_exist(bazel_bin):
    assert os.access(os.path.join(bazel_bin, "ps_server"), os.X_OK)
    assert os.path.isfile(os.path.join(bazel_bin, "_tf_ps_ops.so"))
    assert os.path.isfile(core_module_path(bazel_bin))


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
         "--port-file", str(port_file), "--num-workers", "1", "--num-servers", "1"],
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


@requires_bazel
def test_pybind_core_imports(bazel_bin):
    # A child process: the in-place _core may already be loaded here, and pybind11 refuses
    # to register the same C++ types twice in one process.
    script = ("import importlib.util, sys\n"
              "spec = importlib.util.spec_from_file_location('_core', sys.argv[1])\n"
              "core = importlib.util.module_from_spec(spec)\n"
              "spec.loader.exec_module(core)\n"
              "print(' '.join(dir(core)))\n")
    result = subprocess.run([sys.executable, "-c", script, core_module_path(bazel_bin)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "push_pull" in result.stdout.split()

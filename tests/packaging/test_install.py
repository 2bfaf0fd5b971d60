"""Installing as a new user does (issue: install like Python users install things).

Each test starts from a copy of the checkout's files as a fresh clone would hold them (no
build outputs) and a virtualenv made for it, with no PYTHONPATH and a working directory
outside the tree, so only what pip installed can be imported:
- `pip install -e .` in a fresh virtualenv (an isolated build: pip installs the build
  requirements itself), then `tfps-run -np 2 -ns 1` on an allreduce checked against NumPy,
  imported from the clone;
- `pip wheel .` from another clone, that wheel installed over the editable one, the same job,
  imported from site-packages;
- an op library compiled against another TensorFlow gives a clear error, not a symbol trace.

pip downloads TensorFlow once into its cache; after that each virtualenv costs about a
minute (installing TensorFlow's files), and each build a compile of the native parts. The
user's virtualenv is shared by the two ways in, which saves one of those minutes.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from smoke_tf import copy_tree  # noqa: E402
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "allreduce_job.py")
PIP_TIMEOUT_S = 1200  # a cold pip cache downloads TensorFlow (~600 MB) for each isolated env
JOB_TIMEOUT_S = 300


@pytest.fixture
def work(tmp_path):
    """tmp_path, removed afterwards: each virtualenv holds ~1.5 GB of TensorFlow, and pytest
    keeps the temporary folders of the last three runs."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


def fresh_tree(dest):
    """The files a clone of the working tree would have (tools/smoke_tf.py's copy)."""
    copy_tree(dest)
    return dest


def user_env(venv):
    """The environment of a user whose shell has the virtualenv activated. The builds are
    CPU builds (TFPS_WITH_CUDA=0): what is checked here is the way in, and nvcc's share of
    two uncached builds cost minutes; `make build` and tests/unit/test_cuda_build.py
    compile the CUDA sources where nvcc is present."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["TFPS_WITH_CUDA"] = "0"
    env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = venv
    return env


def run(cmd, venv, cwd, timeout):
    try:
        result = subprocess.run(cmd, cwd=cwd, env=user_env(venv), capture_output=True,
                                text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"`{' '.join(cmd)}` ran past {timeout} s:\n{e.stdout}\n{e.stderr}")
    assert result.returncode == 0, (f"`{' '.join(cmd)}` exited {result.returncode}:\n"
                                    f"{result.stdout[-6000:]}\n{result.stderr[-6000:]}")
    return result.stdout


def make_venv(path):
    # The base interpreter's venv module, so the new one inherits nothing from ours.
    subprocess.run([sys.executable, "-m", "venv", path], check=True, timeout=120)
    return path


def pip(venv, *args, cwd):
    return run([os.path.join(venv, "bin", "python"), "-m", "pip", *args], venv, cwd,
               PIP_TIMEOUT_S)


def run_job(venv, cwd):
    out = run([os.path.join(venv, "bin", "tfps-run"), "-np", "2", "-ns", "1",
               "--timeout", str(JOB_TIMEOUT_S - 30), os.path.join(venv, "bin", "python"), JOB],
              venv, cwd, JOB_TIMEOUT_S)
    for rank in (0, 1):
        assert f"[worker {rank}] ok {rank}" in out, out
    return [line.split("imported ", 1)[1] for line in out.splitlines() if " imported " in line]


# Two uncached builds and a TensorFlow install: past `make test`'s 600 s per test on 2 cores
# (each pip step is bounded by PIP_TIMEOUT_S besides).
@pytest.mark.timeout(1800)
def test_editable_install_then_the_wheel_in_a_fresh_virtualenv(work):
    """One user virtualenv for both ways in, so TensorFlow is installed into it once: first
    `pip install -e` (compiles in the clone, imports from it), then a wheel built by
    `pip wheel` from another clone replaces it (imports from site-packages, with the clone
    gone). Each build is pip's isolated one, with its own TensorFlow."""
    user = make_venv(str(work / "user"))

    editable = fresh_tree(str(work / "editable"))
    pip(user, "install", "-e", editable, cwd=str(work))
    for artifact in ("_tf_ps_ops.so", "bin/ps_server", "_build_info.json"):
        assert os.path.exists(os.path.join(editable, "tf_ps_ops", artifact)), artifact
    imported = run_job(user, str(work))
    assert imported and all(path.startswith(editable) for path in imported), imported

    tree = fresh_tree(str(work / "clone"))
    pip(user, "wheel", "--no-deps", "-w", str(work / "dist"), tree, cwd=str(work))
    wheels = os.listdir(work / "dist")
    # A platform wheel (it carries compiled code), not py3-none-any.
    assert len(wheels) == 1 and "-none-any" not in wheels[0], wheels
    pip(user, "install", "--force-reinstall", "--no-deps", str(work / "dist" / wheels[0]),
        cwd=str(work))
    site = run([os.path.join(user, "bin", "python"), "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
               user, str(work), 60).strip()
    for artifact in ("_tf_ps_ops.so", "bin/ps_server", "_build_info.json"):
        assert os.path.exists(os.path.join(site, "tf_ps_ops", artifact)), artifact
    shutil.rmtree(tree)  # nothing may come from either source tree
    shutil.rmtree(editable)
    imported = run_job(user, str(work))
    assert imported and all(path.startswith(site) for path in imported), imported


def test_wrong_tensorflow_version_is_a_clear_error(tmp_path):
    """A copy of the in-place package whose build record names another TensorFlow."""
    built = os.path.join(ROOT, "tf_ps_ops", "_tf_ps_ops.so")
    if not os.path.exists(built):
        pytest.fail("the in-place build is missing: run `make build` first")
    shutil.copytree(os.path.join(ROOT, "tf_ps_ops"), tmp_path / "tf_ps_ops",
                    ignore=shutil.ignore_patterns("cc", "kernels", "__pycache__"))
    with open(tmp_path / "tf_ps_ops" / "_build_info.json", "w") as f:
        json.dump({"tensorflow": "2.19.0"}, f)
    code = ("import tf_ps_ops as hvd\n"
            "try:\n    hvd.init()\n"
            "except ImportError as e:\n    print(type(e).__name__, e)\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path), TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-4000:]
    message = result.stdout
    assert message.startswith("TensorFlowVersionError"), (message, result.stderr[-4000:])
    assert "compiled against TensorFlow 2.19.0" in message, message
    import importlib.metadata
    assert f"runs TensorFlow {importlib.metadata.version('tensorflow')}" in message, message
    assert "--no-build-isolation" in message and "make build" in message, message

"""One version: tf_ps_ops.__version__ (tf_ps_ops/common/version.py), what pip's metadata
reads from it (pyproject.toml), `tfps-run --version` and `ps_server --version` (the C++
copy in tf_ps_ops/cc/common/version.h) all say the same."""

import re
import subprocess
import sys

import pytest

import tf_ps_ops
from cluster import REPO, require_build

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None


def test_version_is_a_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|rc\d+)?", tf_ps_ops.__version__)


@pytest.mark.skipif(tomllib is None, reason="tomllib needs Python 3.11")
def test_pyproject_reads_the_version_from_the_package():
    with open(REPO / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)
    assert "version" in project["project"]["dynamic"]
    assert "version" not in project["project"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    module, name = attr.rsplit(".", 1)
    assert getattr(__import__(module, fromlist=[name]), name) == tf_ps_ops.__version__


def test_tfps_run_prints_the_version():
    out = subprocess.run([sys.executable, "-m", "tf_ps_ops.run", "--version"], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == f"tfps-run (tf_ps_ops) {tf_ps_ops.__version__}"


def test_ps_server_prints_the_same_version():
    require_build()
    binary = REPO / "tf_ps_ops" / "bin" / "ps_server"
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                         timeout=30, check=True).stdout
    assert out.strip() == f"ps_server (tf_ps_ops) {tf_ps_ops.__version__}"
    header = (REPO / "tf_ps_ops" / "cc" / "common" / "version.h").read_text()
    assert f'kPackageVersion[] = "{tf_ps_ops.__version__}"' in header

"""What the multi-host tests share: the harness import, the skip reason, the build check."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import netns  # noqa: E402
from ps_cluster import PS_SERVER  # noqa: E402

AVAILABLE, WHY_NOT = netns.available()


def namespaces():
    """Names of every network namespace on this machine."""
    result = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                            timeout=20, check=True)
    return {line.split()[0] for line in result.stdout.splitlines() if line.strip()}


def require_build(library_glob):
    """Skips when ps_server or tf_ps_ops/<library_glob> is not built; in CI that fails."""
    missing = [str(p) for p in (PS_SERVER,) if not p.exists()]
    if not list((REPO / "tf_ps_ops").glob(library_glob)):
        missing.append("tf_ps_ops/" + library_glob)
    if missing:
        message = "not built: %s; run `make build`" % ", ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)

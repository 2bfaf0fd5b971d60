"""A cluster of real processes on this host: scheduler, servers and workers.

    cluster = Cluster(tmp_path, num_workers=3, num_servers=2)
    cluster.start([sys.executable, "worker.py"])
    cluster.wait()
    cluster.assert_ok()
    cluster.close()          # always, also on failure (the fixtures do it)

Every process has its stdout/stderr in a file (no pipe can fill and block it), belongs to
its own session (killing it kills its children) and lives under one hard deadline; the
machinery is tfps_harness/launch_cluster.py, shared with tfps-run and the benchmarks. A
test never passes because a child died silently: `assert_ok` checks every exit code and
quotes the stderr of every process that failed. Fault tests use `kill(role, index)` and
`result(role, index)`.
"""

import os
import shlex
import socket
import signal
import subprocess
import time
from pathlib import Path

from tfps_harness.launch_cluster import LoggedCluster

REPO = Path(__file__).resolve().parents[1]
PS_SERVER = REPO / "tf_ps_ops" / "bin" / "ps_server"
OP_LIBRARY = REPO / "tf_ps_ops" / "_tf_ps_ops.so"
# Which of the worker variables (tf_ps_ops/runner/env.py) each env_style sets: one
# dialect each, so that each way a worker reads its place is tested on its own.
_DIALECTS = {"tfps": ("tfps",), "byteps": ("dmlc",)}


def require_build():
    """Skips the test when the native build is missing; in CI that is a failure."""
    import pytest

    missing = [str(path) for path in (OP_LIBRARY, PS_SERVER) if not path.exists()]
    if missing:
        message = f"not built: {', '.join(missing)}; run `make build`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def free_base(count):
    """A port P with P..P+count-1 free now (bound and released; racy, but only loopback)."""
    import pytest

    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count > 65535:
            continue
        try:
            probes = []
            for port in range(base, base + count):
                probe = socket.socket()
                probes.append(probe)
                probe.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for probe in probes:
                probe.close()
    pytest.fail("no run of free ports found")


def run_job(command, timeout, env=None):
    """Runs `command` (tfps-run, or a driver script) from the checkout, its output merged;
    fails the test, after killing its whole process group, if it outlives `timeout`, and
    when it exits non-zero. Returns the output. `env` adds to (None: removes from) what the
    jobs of the tests get: loopback binds, TF quiet, this checkout on the path."""
    import pytest

    require_build()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2",
           "TFPS_BIND": "127.0.0.1", **(env or {})}
    env = {name: value for name, value in env.items() if value is not None}
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{shlex.join(map(str, command))} still running after {timeout} s:\n"
                    f"{out[-6000:]}")
    assert proc.returncode == 0, (f"{shlex.join(map(str, command))} exited {proc.returncode}:"
                                  f"\n{out[-6000:]}")
    return out


class Cluster(LoggedCluster):
    def __init__(self, workdir, num_workers, num_servers, timeout=120, env=None,
                 env_style="tfps", server_grace=20):
        """`timeout` bounds the whole run, from start() until every worker has exited;
        servers then get `server_grace` seconds to exit on their own. `env` is added to
        every process. `env_style` "byteps" gives workers DMLC_* instead of TFPS_*."""
        super().__init__(PS_SERVER, workdir, num_workers, num_servers, timeout, env=env,
                         server_grace=server_grace, dialects=_DIALECTS[env_style],
                         # One host: nothing needs to listen beyond loopback. The flat
                         # path, which these tests are about (on one host hierarchical
                         # aggregation would make the servers mere relays of one local
                         # sum); test_hierarchical*.py and the "hierarchical" training run
                         # turn it on.
                         defaults={"TF_CPP_MIN_LOG_LEVEL": "2", "TFPS_BIND": "127.0.0.1",
                                   "TFPS_HIERARCHICAL": "0"},
                         cwd=REPO)

    def wait_for_output(self, role, index, text, timeout=30):
        """Waits until process (role, index) has printed `text` (stdout or stderr) and
        returns its result so far; fails if it exits first or `timeout` passes."""
        import pytest

        limit = time.monotonic() + timeout
        while time.monotonic() < limit:
            result = self.result(role, index)
            if text in result.stdout or text in result.stderr:
                return result
            assert result.returncode is None, result.describe()
            time.sleep(0.05)
        pytest.fail(f"{role} {index} never printed {text!r}:\n"
                    + self.result(role, index).describe())

    def assert_ok(self):
        """Every process exited 0 in time; otherwise fails quoting each failed one."""
        failed = self.failures()
        assert not failed, ("processes failed:\n"
                            + "\n".join(result.describe() for result in failed))

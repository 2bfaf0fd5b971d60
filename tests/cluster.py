"""A cluster of real processes on this host: scheduler, servers and workers.

    cluster = Cluster(tmp_path, num_workers=3, num_servers=2)
    cluster.start([sys.executable, "worker.py"])
    cluster.wait()
    cluster.assert_ok()
    cluster.close()          # always, also on failure (the fixtures do it)

Every process has its stdout/stderr in a file (no pipe can fill and block it), belongs to
its own session (killing it kills its children) and lives under one hard deadline; the
processes themselves are tf_ps_ops/_launch_job.py's, as tfps-run's and the benchmarks' are. A
test never passes because a child died silently: `assert_ok` checks every exit code and
quotes the stderr of every process that failed. Fault tests use `kill(role, index)` and
`result(role, index)`.
"""

import os
import signal
import time
from pathlib import Path

from tf_ps_ops._launch_env import without_cluster_variables, worker_env
from tf_ps_ops._launch_job import Job, LaunchError
from tf_ps_ops._launch_process import LogFiles

REPO = Path(__file__).resolve().parents[1]
PS_SERVER = REPO / "tf_ps_ops" / "bin" / "ps_server"
OP_LIBRARY = REPO / "tf_ps_ops" / "_tf_ps_ops.so"
# Which of the worker variables (tf_ps_ops/_launch_env.py) each env_style sets: one
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


class Cluster:
    def __init__(self, workdir, num_workers, num_servers, timeout=120, env=None,
                 env_style="tfps", server_grace=20):
        """`timeout` bounds the whole run, from start() until every worker has exited;
        servers then get `server_grace` seconds to exit on their own. `env` is added to
        every process. `env_style` "byteps" gives workers DMLC_* instead of TFPS_*."""
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.num_workers, self.num_servers = num_workers, num_servers
        self.timeout, self.server_grace = timeout, server_grace
        self.extra_env = dict(env or {})
        self.env_style = env_style
        self.port = None
        self._deadline = None
        self._job = None  # made by start()

    # --- starting ---------------------------------------------------------------------

    def _base_env(self):
        env = without_cluster_variables(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        env.update(self.extra_env)
        return env

    def _worker_env(self, rank):
        env = worker_env(self._job.place(rank), self._base_env(), _DIALECTS[self.env_style])
        env.update(self.extra_env)  # the test's variables win, even over the cluster's
        return env

    def start(self, worker_command):
        """Starts scheduler, servers and workers. `worker_command` is an argv list, or a
        function of the rank returning one."""
        self._deadline = time.monotonic() + self.timeout
        self._job = Job(PS_SERVER, self.num_workers, self.num_servers,
                        LogFiles(self.workdir), timeout=self.timeout, cwd=REPO)
        try:
            self.port = self._job.start_scheduler(self._base_env(),
                                                  self.workdir / "scheduler.port", wait_s=15)
        except LaunchError as e:
            self.close()
            raise RuntimeError(f"the scheduler did not publish its port ({e}):\n"
                               + self.result("scheduler", 0).describe()) from None
        for index in range(self.num_servers):
            self._job.start_server(index, self._base_env())
        for rank in range(self.num_workers):
            command = worker_command(rank) if callable(worker_command) else worker_command
            self._job.start_worker(rank, command, self._worker_env(rank))
        return self

    # --- observing and stopping -------------------------------------------------------

    def _others(self):
        return [p for p in self._job.processes if p.role != "worker"]

    def wait_for(self, role, index, timeout=None):
        """Waits for one process (until the cluster deadline by default); its result."""
        deadline = self._deadline if timeout is None else time.monotonic() + timeout
        self._job.wait([self._job.process(role, index)], deadline)
        return self.result(role, index)

    def wait(self):
        """Waits for every worker, then gives the servers and the scheduler their grace
        period to exit on their own. Anything still running at its deadline is killed and
        marked timed out. Returns all results."""
        workers = [self._job.process("worker", rank) for rank in range(self.num_workers)]
        self._job.wait(workers, self._deadline)
        self._job.wait(self._others(), time.monotonic() + self.server_grace)
        return self.results()

    def kill(self, role, index, sig=signal.SIGKILL):
        """Sends `sig` (SIGKILL by default) to one process, on purpose."""
        self._job.process(role, index).kill(sig)

    def close(self):
        """Kills whatever still runs. Safe to call more than once."""
        if self._job is not None:
            self._job.teardown()

    def result(self, role, index):
        return self._job.process(role, index).result()

    def results(self):
        return [process.result() for process in self._job.processes]

    def worker_results(self):
        return [self.result("worker", rank) for rank in range(self.num_workers)]

    def assert_ok(self):
        """Every process exited 0 in time; otherwise fails quoting each failed one."""
        failed = [result for result in self.results() if not result.ok]
        assert not failed, ("processes failed:\n"
                            + "\n".join(result.describe() for result in failed))

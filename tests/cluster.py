"""A cluster of real processes on this host: scheduler, servers and workers.

    cluster = Cluster(tmp_path, num_workers=3, num_servers=2)
    cluster.start([sys.executable, "worker.py"])
    cluster.wait()
    cluster.assert_ok()
    cluster.close()          # always, also on failure (the fixtures do it)

Every process has its stdout/stderr in a file (no pipe can fill and block it), belongs to
its own session (killing it kills its children) and lives under one hard deadline. A
test never passes because a child died silently: `assert_ok` checks every exit code and
quotes the stderr of every process that failed. Fault tests use `kill(role, index)` and
`result(role, index)`.
"""

import dataclasses
import os
import signal
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PS_SERVER = REPO / "tf_ps_ops" / "bin" / "ps_server"
OP_LIBRARY = REPO / "tf_ps_ops" / "_tf_ps_ops.so"

# Inherited cluster variables would override what the cluster sets.
_FOREIGN_PREFIXES = ("TFPS_", "DMLC_", "HOROVOD_")


def require_build():
    """Skips the test when the native build is missing; in CI that is a failure."""
    import pytest

    missing = [str(path) for path in (OP_LIBRARY, PS_SERVER) if not path.exists()]
    if missing:
        message = f"not built: {', '.join(missing)}; run `make build`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@dataclasses.dataclass
class ProcessResult:
    role: str
    index: int
    returncode: object  # int, or None while running
    stdout: str
    stderr: str
    timed_out: bool = False  # still running at its deadline: killed by the fixture
    killed: bool = False  # killed on purpose by the test

    @property
    def ok(self):
        return self.returncode == 0 and not self.timed_out

    def describe(self, tail=6000):
        state = "TIMED OUT" if self.timed_out else f"exit code {self.returncode}"
        return (f"--- {self.role} {self.index}: {state}\n"
                f"stderr (last {tail} chars):\n{self.stderr[-tail:]}\n"
                f"stdout (last 2000 chars):\n{self.stdout[-2000:]}")


class _Process:
    def __init__(self, role, index, command, env, workdir):
        self.role, self.index = role, index
        self.stdout_path = workdir / f"{role}{index}.out"
        self.stderr_path = workdir / f"{role}{index}.err"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.popen = subprocess.Popen([str(part) for part in command], stdout=out,
                                          stderr=err, env=env, cwd=REPO,
                                          start_new_session=True)
        self.timed_out = False
        self.killed = False

    def signal(self, sig):
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def result(self):
        return ProcessResult(self.role, self.index, self.popen.poll(),
                             self.stdout_path.read_text(errors="replace"),
                             self.stderr_path.read_text(errors="replace"),
                             self.timed_out, self.killed)


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
        self._processes = {}  # (role, index) -> _Process

    # --- starting ---------------------------------------------------------------------

    def _base_env(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_PREFIXES)}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        env.update(self.extra_env)
        return env

    def _spawn(self, role, index, command, env):
        self._processes[(role, index)] = _Process(role, index, command, env, self.workdir)

    def _size_flags(self):
        return ["--num-workers", self.num_workers, "--num-servers", self.num_servers]

    def _start_scheduler(self):
        port_file = self.workdir / "scheduler.port"
        self._spawn("scheduler", 0, [PS_SERVER, "--role", "scheduler", "--port", 0,
                                     "--port-file", port_file, *self._size_flags()],
                    self._base_env())
        scheduler = self._processes[("scheduler", 0)]
        limit = time.monotonic() + 15
        while time.monotonic() < limit:
            if port_file.exists() and port_file.read_text().endswith("\n"):
                self.port = int(port_file.read_text())
                return
            if scheduler.popen.poll() is not None:
                break
            time.sleep(0.05)
        self.close()
        raise RuntimeError("the scheduler did not publish its port:\n"
                           + scheduler.result().describe())

    def _worker_env(self, rank):
        env = self._base_env()
        if self.env_style == "byteps":
            env.update(DMLC_ROLE="worker", DMLC_PS_ROOT_URI="127.0.0.1",
                       DMLC_PS_ROOT_PORT=str(self.port), DMLC_WORKER_ID=str(rank),
                       DMLC_NUM_WORKER=str(self.num_workers),
                       DMLC_NUM_SERVER=str(self.num_servers))
        else:
            env.update(TFPS_SCHEDULER=f"127.0.0.1:{self.port}", TFPS_RANK=str(rank),
                       TFPS_SIZE=str(self.num_workers),
                       TFPS_NUM_SERVERS=str(self.num_servers))
        env.update(self.extra_env)  # the test's variables win, even over the cluster's
        return env

    def start(self, worker_command):
        """Starts scheduler, servers and workers. `worker_command` is an argv list, or a
        function of the rank returning one."""
        self._deadline = time.monotonic() + self.timeout
        self._start_scheduler()
        for index in range(self.num_servers):
            self._spawn("server", index, [PS_SERVER, "--role", "server", "--scheduler",
                                          f"127.0.0.1:{self.port}", *self._size_flags()],
                        self._base_env())
        for rank in range(self.num_workers):
            command = worker_command(rank) if callable(worker_command) else worker_command
            self._spawn("worker", rank, command, self._worker_env(rank))
        return self

    # --- observing and stopping -------------------------------------------------------

    def _wait_one(self, process, deadline):
        try:
            process.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.timed_out = True
            process.signal(signal.SIGKILL)
            process.popen.wait()

    def wait_for(self, role, index, timeout=None):
        """Waits for one process (until the cluster deadline by default); its result."""
        deadline = self._deadline if timeout is None else time.monotonic() + timeout
        self._wait_one(self._processes[(role, index)], deadline)
        return self.result(role, index)

    def wait(self):
        """Waits for every worker, then gives the servers and the scheduler their grace
        period to exit on their own. Anything still running at its deadline is killed and
        marked timed out. Returns all results."""
        for rank in range(self.num_workers):
            self._wait_one(self._processes[("worker", rank)], self._deadline)
        grace = time.monotonic() + self.server_grace
        for (role, _), process in self._processes.items():
            if role != "worker":
                self._wait_one(process, grace)
        return self.results()

    def kill(self, role, index, sig=signal.SIGKILL):
        """Sends `sig` (SIGKILL by default) to one process, on purpose."""
        process = self._processes[(role, index)]
        process.killed = True
        process.signal(sig)

    def close(self):
        """Kills whatever still runs. Safe to call more than once."""
        for process in self._processes.values():
            process.signal(signal.SIGKILL)
        for process in self._processes.values():
            process.popen.wait()

    def result(self, role, index):
        return self._processes[(role, index)].result()

    def results(self):
        return [process.result() for process in self._processes.values()]

    def worker_results(self):
        return [self.result("worker", rank) for rank in range(self.num_workers)]

    def assert_ok(self):
        """Every process exited 0 in time; otherwise fails quoting each failed one."""
        failed = [result for result in self.results() if not result.ok]
        assert not failed, ("processes failed:\n"
                            + "\n".join(result.describe() for result in failed))

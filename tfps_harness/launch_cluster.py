"""A job for tests and benchmarks: output in log files, every process run to its end.

    cluster = LoggedCluster(ps_server, workdir, num_workers=3, num_servers=2, timeout=120)
    cluster.start([sys.executable, "worker.py"])   # or a function of the rank
    cluster.wait()
    failed = cluster.failures()                     # every result that is not ok
    cluster.close()                                 # always, also on failure

Unlike tfps-run, nothing stops at the first failure: fault tests kill a process on
purpose and check how each survivor ends. The output of each process is in
WORKDIR/<role><index>.out and .err, readable while it runs. tests/cluster.py (this host)
and benchmarks/ps_cluster.py (emulated hosts: override `host`) build on this.
"""

import os
import signal
import time
from pathlib import Path

from tf_ps_ops.runner.env import without_cluster_variables, worker_env
from tf_ps_ops.runner.job import Job, LaunchError
from tf_ps_ops.runner.process import LOCAL, LogFiles


class LoggedCluster:
    error = RuntimeError  # what start() raises when the scheduler publishes no port

    def __init__(self, ps_server, workdir, num_workers, num_servers, timeout, env=None,
                 server_grace=20, dialects=("tfps",), defaults=None, cwd=None):
        """`timeout` bounds everything from start() until the last worker exits; servers
        and the scheduler then get `server_grace` seconds to exit on their own. Every
        process gets our environment less inherited cluster variables, then `defaults`,
        then `env`; workers also their place in `dialects`, which `env` can override.
        `cwd` is the processes' working directory and goes first on their PYTHONPATH."""
        self.ps_server = ps_server
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.num_workers, self.num_servers = num_workers, num_servers
        self.timeout, self.server_grace = timeout, server_grace
        self.extra_env = dict(env or {})
        self.defaults = dict(defaults or {})
        self.dialects, self.cwd = dialects, cwd
        self.port = None
        self._deadline = None
        self._job = None  # made by start()

    # --- starting ---------------------------------------------------------------------

    def host(self, role, index):
        """Where process (role, index) runs: this machine unless overridden."""
        return LOCAL

    def base_env(self):
        env = without_cluster_variables(os.environ)
        if self.cwd is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.cwd),
                                                              env.get("PYTHONPATH")]))
        env.update(self.defaults)
        env.update(self.extra_env)
        return env

    def worker_env(self, rank):
        env = worker_env(self._job.place(rank), self.base_env(), self.dialects)
        env.update(self.extra_env)  # the caller's variables win, even over the place
        return env

    def start(self, worker_command):
        """Starts scheduler, servers and workers. `worker_command` is an argv list, or a
        function of the rank returning one."""
        self._deadline = time.monotonic() + self.timeout
        self._job = Job(self.ps_server, self.num_workers, self.num_servers,
                        LogFiles(self.workdir), timeout=self.timeout, cwd=self.cwd)
        try:
            self.port = self._job.start_scheduler(
                self.base_env(), self.workdir / "scheduler.port",
                host=self.host("scheduler", 0), wait_s=15)
        except LaunchError as e:
            self.close()
            raise self.error(f"the scheduler did not publish its port ({e}):\n"
                             + self.result("scheduler", 0).describe()) from None
        for index in range(self.num_servers):
            self._job.start_server(index, self.base_env(), self.host("server", index))
        for rank in range(self.num_workers):
            command = worker_command(rank) if callable(worker_command) else worker_command
            self._job.start_worker(rank, command, self.worker_env(rank),
                                   self.host("worker", rank))
        return self

    # --- observing and stopping -------------------------------------------------------

    def process(self, role, index):
        return self._job.process(role, index)

    def processes(self):
        """Every process started (with fields role, index, pid), in start order."""
        return list(self._job.processes) if self._job else []

    def wait_for(self, role, index, timeout=None):
        """Waits for one process (until the cluster deadline by default); its result."""
        deadline = self._deadline if timeout is None else time.monotonic() + timeout
        self._job.wait([self.process(role, index)], deadline)
        return self.result(role, index)

    def wait(self, tick=None):
        """Waits for every worker, then gives the servers and the scheduler their grace
        period to exit on their own. Anything still running at its deadline is killed and
        marked timed out. `tick()`, if given, is called about every 50 ms while workers
        run (progress output). Returns all results."""
        workers = [self.process("worker", rank) for rank in range(self.num_workers)]
        self._job.wait(workers, self._deadline, tick)
        others = [p for p in self._job.processes if p.role != "worker"]
        self._job.wait(others, time.monotonic() + self.server_grace)
        return self.results()

    def kill(self, role, index, sig=signal.SIGKILL):
        """Sends `sig` (SIGKILL by default) to one process, on purpose."""
        self.process(role, index).kill(sig)

    def close(self):
        """Kills whatever still runs, with its process group. Safe to call more than once."""
        if self._job is not None:
            self._job.teardown()

    def result(self, role, index):
        return self.process(role, index).result()

    def results(self):
        return [process.result() for process in self.processes()]

    def worker_results(self):
        return [self.result("worker", rank) for rank in range(self.num_workers)]

    def failures(self):
        """The results of every process that did not exit 0 in time (or still runs)."""
        return [result for result in self.results() if not result.ok]

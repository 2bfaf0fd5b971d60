"""A tf_ps_ops cluster on emulated hosts: the scheduler on host 0, and on every host one
ps_server and one worker (BytePS's colocated mode: a worker's own partition never crosses
the link).

    with Hosts(2, rate="1gbit") as hosts:
        cluster = NetnsCluster(hosts, workdir, timeout=60)
        cluster.start(lambda rank: [sys.executable, "worker.py"])
        cluster.wait()
        cluster.check()          # raises ClusterError quoting every failed process

Workers learn their place from TFPS_SCHEDULER, TFPS_RANK, TFPS_SIZE and TFPS_NUM_SERVERS
(and NETNS_SERVER_PID: the pid of the ps_server on their host, for CPU accounting).
Every process writes stdout/stderr to a file (no pipe can fill up), lives under one
deadline, and is reaped with os.wait4 so its CPU time is known.
"""

import dataclasses
import os
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PS_SERVER = REPO / "tf_ps_ops" / "bin" / "ps_server"
_FOREIGN_PREFIXES = ("TFPS_", "DMLC_", "HOROVOD_")  # inherited ones would override ours


class ClusterError(RuntimeError):
    pass


@dataclasses.dataclass
class ProcessResult:
    role: str
    index: int
    returncode: object  # int; None while running
    stdout: str
    stderr: str
    timed_out: bool
    cpu_s: float  # user + system, known once reaped

    @property
    def ok(self):
        return self.returncode == 0 and not self.timed_out

    def describe(self, tail=6000):
        state = "TIMED OUT (killed)" if self.timed_out else "exit code %s" % self.returncode
        return ("--- %s %d: %s\nstderr (last %d chars):\n%s\nstdout (last 3000 chars):\n%s"
                % (self.role, self.index, state, tail, self.stderr[-tail:], self.stdout[-3000:]))


@dataclasses.dataclass
class ProcessId:
    role: str
    index: int
    pid: int


class _Process:
    def __init__(self, hosts, host, role, index, argv, env, workdir):
        self.role, self.index = role, index
        self.out_path = workdir / ("%s%d.out" % (role, index))
        self.err_path = workdir / ("%s%d.err" % (role, index))
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.popen = hosts.popen(host, argv, stdout=out, stderr=err, env=env, cwd=REPO,
                                     stdin=subprocess.DEVNULL)
        self.timed_out = False
        self.cpu_s = 0.0

    def poll(self):
        """Reaps the process if it exited (collecting its CPU time); its exit code or None."""
        if self.popen.returncode is not None:
            return self.popen.returncode
        try:
            pid, status, usage = os.wait4(self.popen.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere (Hosts.close): trust Popen
            return self.popen.poll()
        if pid == 0:
            return None
        self.cpu_s = usage.ru_utime + usage.ru_stime
        self.popen.returncode = os.waitstatus_to_exitcode(status)
        return self.popen.returncode

    def wait(self, deadline, tick=None):
        while self.poll() is None:
            if tick is not None:
                tick()
            if time.monotonic() > deadline:
                self.timed_out = True
                self.popen.kill()
                while self.poll() is None:
                    time.sleep(0.01)
                break
            time.sleep(0.05)  # the driver shares the CPUs with what it measures
        return self.popen.returncode

    def result(self):
        return ProcessResult(self.role, self.index, self.poll(),
                             self.out_path.read_text(errors="replace"),
                             self.err_path.read_text(errors="replace"),
                             self.timed_out, self.cpu_s)


class NetnsCluster:
    def __init__(self, hosts, workdir, timeout, env=None, server_grace=20):
        """`timeout` bounds everything from start() until the last worker exits; servers
        and scheduler then get `server_grace` seconds to exit on their own."""
        if not PS_SERVER.exists():
            raise ClusterError("%s is not built: run `python3 setup.py build_tfps`" % PS_SERVER)
        self.hosts = hosts
        self.n = hosts.n
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.timeout, self.server_grace = timeout, server_grace
        self.extra_env = dict(env or {})
        self.port = None
        self._deadline = None
        self._processes = {}  # (role, index) -> _Process

    def _env(self, **more):
        env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_PREFIXES)}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        env.update(self.extra_env)
        env.update({k: str(v) for k, v in more.items()})
        return env

    def _spawn(self, host, role, index, argv, env):
        process = _Process(self.hosts, host, role, index, argv, env, self.workdir)
        self._processes[(role, index)] = process
        return process

    def _sizes(self):
        return ["--num-workers", self.n, "--num-servers", self.n]

    def start(self, worker_argv):
        """`worker_argv(rank)` gives the argv of the worker on host `rank`."""
        self._deadline = time.monotonic() + self.timeout
        port_file = self.workdir / "scheduler.port"
        scheduler = self._spawn(0, "scheduler", 0, [PS_SERVER, "--role", "scheduler", "--port",
                                                   0, "--port-file", port_file, *self._sizes()],
                                self._env())
        limit = time.monotonic() + 15
        while self.port is None:
            text = port_file.read_text() if port_file.exists() else ""
            if text.endswith("\n"):
                self.port = int(text)
            elif scheduler.poll() is not None or time.monotonic() > limit:
                raise ClusterError("the scheduler did not publish its port:\n"
                                   + scheduler.result().describe())
            else:
                time.sleep(0.02)
        address = "%s:%d" % (self.hosts.address(0), self.port)
        servers = []
        for i in range(self.n):
            servers.append(self._spawn(i, "server", i, [
                PS_SERVER, "--role", "server", "--scheduler", address,
                "--host", self.hosts.address(i), *self._sizes()], self._env()))
        for rank in range(self.n):
            self._spawn(rank, "worker", rank, worker_argv(rank), self._env(
                TFPS_SCHEDULER=address, TFPS_RANK=rank, TFPS_SIZE=self.n,
                TFPS_NUM_SERVERS=self.n, NETNS_SERVER_PID=servers[rank].popen.pid))
        return self

    def wait(self, tick=None):
        """Waits for the workers (killing them at the deadline), then for the servers and
        the scheduler (killing them after the grace period). Returns all results.
        `tick()`, if given, is called about every 50 ms while workers run (progress)."""
        for rank in range(self.n):
            self._processes[("worker", rank)].wait(self._deadline, tick)
        grace = time.monotonic() + self.server_grace
        for (role, _), process in self._processes.items():
            if role != "worker":
                process.wait(grace)
        return self.results()

    def processes(self):
        """[(role, index, pid)] of every process started, as objects with those fields."""
        return [ProcessId(p.role, p.index, p.popen.pid) for p in self._processes.values()]

    def results(self):
        return [p.result() for p in self._processes.values()]

    def result(self, role, index):
        return self._processes[(role, index)].result()

    def check(self):
        """Raises ClusterError with the output of every process that failed or timed out.
        A process still running counts as failed."""
        failed = [r for r in self.results() if not r.ok]
        if failed:
            raise ClusterError("%d of %d processes failed (logs in %s):\n%s" % (
                len(failed), len(self._processes), self.workdir,
                "\n".join(r.describe() for r in failed)))

    def close(self):
        """Kills whatever still runs (by pid; Hosts.close() sweeps the namespaces too)."""
        for process in self._processes.values():
            if process.poll() is None:
                process.timed_out = True
                process.popen.kill()
                process.wait(time.monotonic() + 5)

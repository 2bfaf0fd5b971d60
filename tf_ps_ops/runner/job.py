"""The processes of one job: a scheduler, servers and workers, under one deadline.

The one process launcher of the project: tfps-run (runner/run.py), the test fixture
(tests/cluster.py) and the benchmarks' emulated hosts (benchmarks/ps_cluster.py) all use
it. Its parts: env.py (the variables that tell a worker its place), process.py
(one process: its host, its output, its result) and this module. Standard library only,
no TensorFlow, no op library: tfps-run starts at once.

    job = Job(ps_server, num_workers=2, num_servers=1, output=Prefixed(), timeout=600)
    try:
        port = job.start_scheduler(env, port_file)
        job.start_server(0, env)
        workers = [job.start_worker(r, argv, worker_env(job.place(r), env)) for r in (0, 1)]
        job.supervise(workers, linger_s=2)   # or job.wait(...): see below
    finally:
        job.teardown(grace_s=3)

Two ways to watch a running job. `supervise` is tfps-run's: the first process to fail
ends the job, and is named. `wait` is the fixtures': every process runs to its end or
its deadline, and the caller checks each result (fault tests expect some to fail).
"""

import os
import signal
import time

from tf_ps_ops.runner.env import Place
from tf_ps_ops.runner.process import LOCAL, Process, describe_exit, shell_code

_SETTLE_S = 1.0  # after a first failure, how long exits may still arrive before blame
_POLL_S = 0.05  # also the cost of watching: the launcher shares the CPUs with its job
_REAP_LIMIT_S = 10.0  # a SIGKILLed process in uninterruptible sleep must not hang us

# Signals that ask a process to stop: it tells the others first (engine/stop_signal.h), so
# their exits can be seen before its own. Any other signal kills without a word.
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _killed_outright(returncode):
    return returncode is not None and returncode < 0 and -returncode not in _STOP_SIGNALS


class LaunchError(Exception):
    """Ends the job. `code` is the exit code a launcher should give (124: timed out,
    127: a command could not start); `process` is the one to blame, if any."""

    def __init__(self, message, code=1, process=None):
        super().__init__(message)
        self.code = code
        self.process = process


class Job:
    def __init__(self, ps_server, num_workers, num_servers, output, timeout=None, cwd=None):
        """`timeout` (seconds from now, None: none) bounds start-up and `supervise`.
        `ps_server` may be None for a job of other processes (the benchmarks' baselines),
        started with `spawn`."""
        self.ps_server = None if ps_server is None else str(ps_server)
        self.num_workers, self.num_servers = num_workers, num_servers
        self.output, self.cwd = output, cwd
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout if timeout else None
        self.processes = []  # in start order
        self._ended = 0  # processes[:_ended] were torn down already
        self.scheduler_host = self.scheduler_port = None

    # --- starting ---------------------------------------------------------------------

    def spawn(self, role, index, argv, env, host=LOCAL):
        try:
            process = Process(role, index, argv, env, self.output, host, self.cwd)
        except OSError as e:  # e.g. a typo in the command: one line, as a shell would say
            name = role if role == "scheduler" else f"{role} {index}"
            raise LaunchError(f"cannot start {name}: {e}", 127) from None
        self.processes.append(process)
        return process

    def process(self, role, index):
        for p in self.processes:
            if (p.role, p.index) == (role, index):
                return p
        raise KeyError(f"no {role} {index} in this job")

    def _counts(self):
        return ["--num-workers", str(self.num_workers), "--num-servers", str(self.num_servers)]

    def start_scheduler(self, env, port_file, host=LOCAL, port=0, wait_s=30.0):
        """Starts the scheduler and returns the port it published in `port_file`. On a
        remote host (no shared file) the port is `port`, or one that host says is free:
        the servers and workers retry their registration until it listens."""
        if host.remote:
            self.scheduler_port = port or host.free_port()
            self.spawn("scheduler", 0, [
                self.ps_server, "--role", "scheduler", "--port", str(self.scheduler_port),
                *self._counts()], env, host)
            self.scheduler_host = host.address
            return self.scheduler_port
        # A file left by an earlier job in the same folder would be read as this
        # scheduler's port before it writes its own: every process would then wait out
        # TFPS_TIMEOUT knocking on a dead port.
        if os.path.exists(port_file):
            os.unlink(port_file)
        scheduler = self.spawn("scheduler", 0, [
            self.ps_server, "--role", "scheduler", "--port", str(port),
            "--port-file", str(port_file), *self._counts()], env, host)
        give_up = time.monotonic() + wait_s
        while True:
            # ps_server writes the file atomically, so a file that exists is complete.
            if os.path.exists(port_file):
                with open(port_file) as f:
                    text = f.read()
                try:
                    self.scheduler_host, self.scheduler_port = host.address, int(text)
                except ValueError:
                    raise LaunchError(f"scheduler wrote {text!r} to its port file",
                                      process=scheduler) from None
                return self.scheduler_port
            code = scheduler.poll()
            if code is not None:
                raise LaunchError(f"scheduler {describe_exit(code)} before publishing its "
                                  f"port", shell_code(code) or 1, scheduler)
            if time.monotonic() > give_up:
                raise LaunchError(f"scheduler published no port within {wait_s:g} s",
                                  process=scheduler)
            self._sleep()

    def start_server(self, index, env, host=LOCAL, threads=None):
        argv = [self.ps_server, "--role", "server",
                "--scheduler", f"{self.scheduler_host}:{self.scheduler_port}", *self._counts()]
        if not host.local:  # the default is this machine's loopback: say where we are
            argv += ["--host", host.address]
        if threads:
            argv += ["--threads", str(threads)]
        return self.spawn("server", index, argv, env, host)

    def place(self, rank, local_rank=0, local_size=1):
        """Worker `rank`'s place in this job (after start_scheduler)."""
        return Place(rank, self.num_workers, self.num_servers, self.scheduler_host,
                     self.scheduler_port, local_rank, local_size)

    def start_worker(self, rank, argv, env, host=LOCAL):
        return self.spawn("worker", rank, argv, env, host)

    # --- watching ---------------------------------------------------------------------

    def _sleep(self):
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise LaunchError(f"timed out after {self.timeout:g} s; stopped all processes", 124)
        time.sleep(_POLL_S)

    def first_failure(self):
        """The process that failed first (non-zero exit), or None.

        Exits seen close together are not in the order of cause and effect: one sweep of
        poll() sees them in start order (the scheduler first), and a worker stopped by
        SIGTERM tells the others before the signal ends it (engine/stop_signal.h), so they
        may exit first. Among the exits within _SETTLE_S of the first, a process killed by
        a signal is the cause, and the scheduler, which only reacts, comes last."""
        failed = [p for p in self.processes if p.poll()]
        if not failed:
            return None
        first = min(p.exited_at for p in failed)
        close = [p for p in failed if p.exited_at - first <= _SETTLE_S]
        return min(close, key=lambda p: (p.returncode >= 0, p.role == "scheduler", p.exited_at))

    def stopped_processes(self):
        """Local processes of the job stopped (SIGSTOP, Ctrl-Z, a debugger): alive but
        answering nothing, so the others lose them by heartbeat and fail first."""
        stopped = []
        for p in self.processes:
            if p.host.remote or p.returncode is not None:
                continue
            try:
                with open(f"/proc/{p.pid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state in ("T", "t"):
                stopped.append(p)
        return stopped

    def _raise_first_failure(self):
        first = self.first_failure()
        if first is None:
            return
        # Let the exits that belong together arrive before naming the cause; a process
        # killed outright (SIGKILL, a crash) is the cause already, and the job ends at once.
        settle = time.monotonic() + (0.0 if _killed_outright(first.returncode) else _SETTLE_S)
        while time.monotonic() < settle and any(p.poll() is None for p in self.processes):
            time.sleep(_POLL_S)
        process = self.first_failure()
        if process is not None:
            how = describe_exit(process.returncode)
            if process.host.remote and process.returncode == 255:
                how += (" (ssh's own failure code: is the host reachable, its key known "
                        "and ours accepted?)")
            stopped = [p.name for p in self.stopped_processes()]
            if stopped:
                raise LaunchError(
                    f"{', '.join(stopped)} {'is' if len(stopped) == 1 else 'are'} stopped "
                    f"(SIGSTOP, Ctrl-Z or a debugger) and stopped answering; then "
                    f"{process.name} {how}; stopped the others",
                    shell_code(process.returncode), process)
            raise LaunchError(f"{process.name} {how}; stopped the others",
                              shell_code(process.returncode), process)

    def supervise(self, workers, linger_s):
        """Returns once every one of `workers` exited 0, and the rest exited too or had
        `linger_s` seconds to (servers exit on their own after the last worker's goodbye,
        and may report a failure of theirs then). Raises LaunchError naming the first
        process to fail, or when the job's deadline passes (code 124)."""
        while True:
            self._raise_first_failure()
            if all(w.returncode == 0 for w in workers):
                break
            self._sleep()
        give_up = time.monotonic() + linger_s
        while time.monotonic() < give_up and any(p.poll() is None for p in self.processes):
            time.sleep(_POLL_S)
            self._raise_first_failure()

    def wait(self, processes, deadline, tick=None):
        """Waits until every one of `processes` exited; those still running at `deadline`
        (time.monotonic()) are killed with their group and marked timed out. `tick()`, if
        given, is called every poll while any runs (progress output)."""
        while True:
            running = [p for p in processes if p.poll() is None]
            if not running:
                return
            if time.monotonic() > deadline:
                for p in running:
                    p.timed_out = True
                    p.signal_group(signal.SIGKILL)
                self._reap(running)
                return
            if tick is not None:
                tick()
            time.sleep(_POLL_S)

    # --- stopping ---------------------------------------------------------------------

    def _reap(self, processes, limit_s=_REAP_LIMIT_S):
        give_up = time.monotonic() + limit_s
        while any(p.poll() is None for p in processes) and time.monotonic() < give_up:
            time.sleep(0.01)

    def teardown(self, grace_s=0.0):
        """SIGTERM every process group, SIGKILL what is left after `grace_s` (at once when
        0), reap every process. Only groups of this call's processes are signalled: a
        second teardown does nothing more to groups an earlier one ended."""
        processes = self.processes[self._ended:]
        self._ended = len(self.processes)
        if grace_s > 0:
            for p in processes:
                p.signal_group(signal.SIGTERM)
            give_up = time.monotonic() + grace_s
            while time.monotonic() < give_up and any(p.poll() is None for p in processes):
                time.sleep(_POLL_S)
        for p in processes:
            p.signal_group(signal.SIGKILL)
        self._reap(processes)
        for p in processes:
            self.output.finish(p)


class _Terminated(BaseException):
    """Raised in the main thread by run_to_teardown's SIGTERM handler, like
    KeyboardInterrupt for SIGINT."""


def _raise_terminated(signum, frame):
    raise _Terminated()


def run_to_teardown(job, body, grace_s, cleanup=None):
    """Runs `body()` (returns an exit code) and then tears `job` down whatever happened:
    a LaunchError, Ctrl-C or SIGTERM ends it with that code and a message. Returns
    (code, message or None); a launcher prints the message after this returns, so that it
    is the last line and "stopped" is true. The launchers' (tfps-run's, tfps-role's) one
    copy of this dance."""
    previous_sigint = signal.getsignal(signal.SIGINT)
    previous_sigterm = signal.signal(signal.SIGTERM, _raise_terminated)
    message = None
    try:
        code = body()
    except LaunchError as e:
        message, code = str(e), e.code
    except KeyboardInterrupt:
        message, code = "interrupted; stopped all processes", 128 + signal.SIGINT
    except _Terminated:
        message, code = "terminated; stopped all processes", 128 + signal.SIGTERM
    finally:
        # A second Ctrl-C must not cut the teardown short and leave processes behind;
        # the teardown itself is bounded by the grace period.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        job.teardown(grace_s)
        if cleanup is not None:
            cleanup()
        signal.signal(signal.SIGINT, previous_sigint)
        signal.signal(signal.SIGTERM, previous_sigterm)
    return code, message

"""One process of a job: where it runs, where its output goes, how it ended.

Every process gets a session of its own, so that signalling its process group reaches
whatever it started too. It is reaped with os.wait4, which also gives its CPU time (the
benchmarks account for it).

A host only changes the command line: this machine runs it as it is; an emulated host
(benchmarks/netns.py) wraps it in `ip netns exec NAME`; a remote host (ssh.py)
wraps it in ssh and sends the command and its environment on stdin (`stdin_payload`),
keeping stdin open so that the remote side notices when the launcher is gone.
"""

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tf_ps_ops.runner.env import LOCAL_ADDRESS


class Host:
    """This machine, reached on loopback, unless `wrap` is given.

    `wrap(argv) -> argv` makes the command run elsewhere (another network namespace);
    `address` is where processes started there can be reached by the other hosts.
    """

    def __init__(self, address=LOCAL_ADDRESS, wrap=None, name=None, tagged=False):
        """`tagged`: output lines of its processes name the host too (multi-host jobs)."""
        self.address = address
        self.name = name or address
        self._wrap = wrap
        self.tagged = tagged

    remote = False  # True: reached over a network (ssh); ports there are found by asking

    @property
    def local(self):
        """True when processes run here as they are (roles keep their default addresses)."""
        return self._wrap is None

    def command(self, argv, env):
        """(argv, env) to hand to subprocess.Popen for running `argv` with `env` here."""
        argv = [str(part) for part in argv]
        return (argv if self._wrap is None else list(self._wrap(argv))), env

    def stdin_payload(self, argv, env):
        """Bytes to write to the process's stdin, which then stays open; None: stdin is
        /dev/null."""
        return None

    def __repr__(self):
        return f"Host({self.name!r})"


LOCAL = Host(name="localhost")


def describe_exit(code):
    """How a process ended, in words: `exited with code 3`, `was killed by signal 9 (SIGKILL)`."""
    if code < 0:
        try:
            return f"was killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:  # a real-time signal has no name
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def shell_code(code):
    """The exit code a shell would report for a child's returncode."""
    return 128 - code if code < 0 else code


@dataclasses.dataclass
class ProcessResult:
    role: str
    index: int
    returncode: object  # int, or None while running
    stdout: str  # "" when the output went elsewhere (Prefixed)
    stderr: str
    timed_out: bool = False  # still running at its deadline, so killed
    killed: bool = False  # signalled on purpose by its owner
    cpu_s: float = 0.0  # user + system, known once reaped

    @property
    def ok(self):
        return self.returncode == 0 and not self.timed_out

    def describe(self, tail=6000):
        state = "TIMED OUT (killed)" if self.timed_out else f"exit code {self.returncode}"
        return (f"--- {self.role} {self.index}: {state}\n"
                f"stderr (last {tail} chars):\n{self.stderr[-tail:]}\n"
                f"stdout (last 3000 chars):\n{self.stdout[-3000:]}")


class LogFiles:
    """Output of each process into WORKDIR/<role><index>.out and .err: no pipe can fill
    up and block a process, and tests read the text back while it runs."""

    def __init__(self, workdir):
        self.workdir = Path(workdir)

    def paths(self, role, index):
        return (self.workdir / f"{role}{index}.out", self.workdir / f"{role}{index}.err")

    def start(self, process, popen):
        out_path, err_path = self.paths(process.role, process.index)
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            return popen(stdout=out, stderr=err)

    def read(self, process):
        return tuple(path.read_text(errors="replace")
                     for path in self.paths(process.role, process.index))

    def finish(self, process):
        pass


class Prefixed:
    """Output of each process onto ours, every line prefixed with `[name] `.

    One lock for both streams keeps whole lines of different processes apart. With
    `log_dir` (horovodrun's --output-filename), each worker's lines also go, unprefixed, to
    log_dir/rank.N/stdout and log_dir/rank.N/stderr. With `timestamps` (horovodrun's
    --prefix-output-with-timestamp) each printed line starts with the local time it
    arrived: `2026-12-01 20:15:03.123 [worker 1] ...`.
    """

    def __init__(self, log_dir=None, timestamps=False):
        self._lock = threading.Lock()
        self._pumps = {}  # Process -> its pump threads
        self._log_dir = log_dir
        self._timestamps = timestamps

    def _stamp(self):
        if not self._timestamps:
            return b""
        now = time.time()
        return (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
                + f".{int(now % 1 * 1000):03d} ").encode()

    def start(self, process, popen):
        child = popen(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        prefix = f"[{process.name}] ".encode()
        logs = self._open_logs(process)
        pumps = [threading.Thread(target=self._pump, args=(pipe, dst, prefix, log),
                                  daemon=True)
                 for pipe, dst, log in ((child.stdout, sys.stdout.buffer, logs[0]),
                                        (child.stderr, sys.stderr.buffer, logs[1]))]
        for pump in pumps:
            pump.start()
        self._pumps[process] = pumps
        return child

    def _open_logs(self, process):
        if self._log_dir is None or process.role != "worker":
            return None, None
        folder = os.path.join(self._log_dir, f"rank.{process.index}")
        os.makedirs(folder, exist_ok=True)
        return tuple(open(os.path.join(folder, stream), "ab") for stream in ("stdout", "stderr"))

    def _pump(self, src, dst, prefix, log=None):
        with src, (log if log is not None else contextlib.nullcontext()):
            for line in iter(src.readline, b""):
                if not line.endswith(b"\n"):
                    line += b"\n"
                if log is not None:
                    log.write(line)
                    log.flush()
                with self._lock:
                    try:
                        dst.write(self._stamp() + prefix + line)
                        dst.flush()
                    except (BrokenPipeError, ValueError):
                        pass  # our output is gone; keep draining so the child never blocks

    def read(self, process):
        return "", ""

    def finish(self, process):
        for pump in self._pumps.pop(process, ()):
            # A grandchild that escaped its group can hold the pipe open: don't hang on it.
            pump.join(timeout=1.0)


class Process:
    """One role of a job (`role` "scheduler", "server" or "worker", `index`), started at
    once on `host` with its output handled by `output` (LogFiles or Prefixed)."""

    def __init__(self, role, index, argv, env, output, host=LOCAL, cwd=None):
        self.role, self.index, self.host = role, index, host
        self.name = role if role == "scheduler" else f"{role} {index}"
        if host.tagged:
            self.name = f"{host.name}:{self.name}"
        self.output = output
        self.timed_out = self.killed = False
        self.cpu_s = 0.0
        self.exited_at = None  # time.monotonic() when its exit was first seen
        payload = host.stdin_payload([str(part) for part in argv], env)
        argv, env = host.command(argv, env)
        stdin = subprocess.DEVNULL if payload is None else subprocess.PIPE
        self.popen = output.start(self, lambda **streams: subprocess.Popen(
            argv, env=env, cwd=cwd, stdin=stdin, start_new_session=True, **streams))
        self.pid = self.popen.pid
        if payload is not None:
            try:  # a few KB: fits the pipe, never blocks; the pipe stays open
                self.popen.stdin.write(payload)
                self.popen.stdin.flush()
            except BrokenPipeError:
                pass  # it died at once: poll() tells how

    @property
    def returncode(self):
        return self.popen.returncode

    def poll(self):
        """Reaps the process if it exited (collecting its CPU time); its exit code or None."""
        if self.popen.returncode is not None:
            return self.popen.returncode
        try:
            pid, status, usage = os.wait4(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped by someone else: trust Popen
            code = self.popen.poll()
        else:
            if pid == 0:
                return None
            self.cpu_s = usage.ru_utime + usage.ru_stime
            code = self.popen.returncode = os.waitstatus_to_exitcode(status)
        if code is not None and self.exited_at is None:
            self.exited_at = time.monotonic()
        return code

    def signal_group(self, sig):
        """Signals the whole process group, even once the process itself has exited: the
        group may outlive its leader. While any member lives its id cannot be reused;
        once all are gone the signal finds no one (or, after a pid wrap-around, a new
        group of that id: the owner signals a group only while the job is its own)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def kill(self, sig=signal.SIGKILL):
        """Sends `sig` on purpose (a fault test): marks the result `killed`."""
        self.killed = True
        if self.poll() is None:
            self.signal_group(sig)

    def result(self):
        stdout, stderr = self.output.read(self)
        return ProcessResult(self.role, self.index, self.poll(), stdout, stderr,
                             self.timed_out, self.killed, self.cpu_s)

    def __repr__(self):
        return f"Process({self.name!r}, pid={self.pid})"

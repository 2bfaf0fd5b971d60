"""tfps-run: start a scheduler, M parameter servers and N workers on this host.

    tfps-run -np 4 -ns 2 python3 train.py --epochs 3

Every child gets its own process group, so teardown (on failure, --timeout, Ctrl-C or
SIGTERM) kills whatever the child started too. Each output line of a child is prefixed
with its role and rank: `[worker 1] `, `[server 0] `, `[scheduler] `.

This module imports only the standard library, so the launcher starts at once; it also
runs by path (`python3 tf_ps_ops/run.py`, which is what `bin/tfps-run` does).
"""

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

DEFAULT_PS_SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "ps_server")
HOST = "127.0.0.1"  # every role of a tfps-run job lives on this host

# The scheduler binds its socket before anything else it does: seconds are plenty.
_PORT_WAIT_S = 30.0
# Servers and the scheduler exit on their own right after the last worker's goodbye;
# with workers that never called init() they never will, so don't wait long.
_SERVER_EXIT_WAIT_S = 2.0
# How long a child has between SIGTERM and SIGKILL.
_KILL_GRACE_S = 3.0
_POLL_S = 0.05


class LaunchError(Exception):
    """Ends the job: the message is printed as `tfps-run: MESSAGE`, then exit `code`."""

    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


class _Terminated(BaseException):
    """Raised in the main thread by our SIGTERM handler, like KeyboardInterrupt for SIGINT."""


def _int_at_least(low):
    def parse(text):
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value
    return parse


def _positive_float(text):
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="tfps-run",
        usage="%(prog)s -np N [-ns M] [--port P] [--timeout S] [--server-threads T] "
              "[--ps-server PATH] COMMAND...",
        description="Run COMMAND as N workers of a parameter-server job on this host.")
    parser.add_argument("-np", "--num-workers", type=_int_at_least(1), required=True,
                        metavar="N", help="number of worker processes running COMMAND")
    parser.add_argument("-ns", "--num-servers", type=_int_at_least(1), default=1,
                        metavar="M", help="number of ps_server processes (default 1)")
    parser.add_argument("--port", type=_int_at_least(0), default=0, metavar="P",
                        help="scheduler port (default 0: any free port)")
    parser.add_argument("--timeout", type=_positive_float, metavar="S",
                        help="kill the whole job after S seconds and exit 124")
    parser.add_argument("--server-threads", type=_int_at_least(1), metavar="T",
                        help="threads per ps_server (default: TFPS_SERVER_THREADS, else the "
                             "server's own)")
    parser.add_argument("--ps-server", default=DEFAULT_PS_SERVER, metavar="PATH",
                        help="ps_server binary (default: the one built into the package)")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND",
                        help="the worker command line, e.g. python3 train.py")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("no COMMAND given: e.g. tfps-run -np 2 python3 train.py")
    if args.port > 65535:
        parser.error(f"--port must be at most 65535, got {args.port}")
    return args


def worker_env(base, rank, size, num_servers, port):
    """The environment of worker `rank`: ours, plus Horovod's, BytePS's and Open MPI's names."""
    env = dict(base)
    env.update({
        "TFPS_SCHEDULER": f"{HOST}:{port}",
        "TFPS_RANK": rank, "TFPS_SIZE": size,
        "TFPS_LOCAL_RANK": rank, "TFPS_LOCAL_SIZE": size,
        "TFPS_NUM_SERVERS": num_servers,
        "DMLC_ROLE": "worker", "DMLC_WORKER_ID": rank,
        "DMLC_NUM_WORKER": size, "DMLC_NUM_SERVER": num_servers,
        "DMLC_PS_ROOT_URI": HOST, "DMLC_PS_ROOT_PORT": port,
        "HOROVOD_RANK": rank, "HOROVOD_SIZE": size,
        "HOROVOD_LOCAL_RANK": rank, "HOROVOD_LOCAL_SIZE": size,
        "OMPI_COMM_WORLD_RANK": rank, "OMPI_COMM_WORLD_SIZE": size,
        "OMPI_COMM_WORLD_LOCAL_RANK": rank, "OMPI_COMM_WORLD_LOCAL_SIZE": size,
    })
    # A Python worker writing to a pipe buffers its output in blocks; prefixed lines
    # would then arrive late and out of order with the other ranks'.
    env.setdefault("PYTHONUNBUFFERED", "1")
    return {key: str(value) for key, value in env.items()}


def _describe_exit(code):
    if code < 0:
        try:
            return f"was killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:  # a real-time signal has no name
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _shell_code(code):
    """The exit code a shell would report for a child's returncode."""
    return 128 - code if code < 0 else code


def _pump(src, dst, prefix, lock):
    # Whole lines, so that the lines of two ranks never interleave mid-line.
    with src:
        for line in iter(src.readline, b""):
            if not line.endswith(b"\n"):
                line += b"\n"
            with lock:
                try:
                    dst.write(prefix + line)
                    dst.flush()
                except (BrokenPipeError, ValueError):
                    pass  # our output is gone; keep draining so the child never blocks


class _Child:
    """One process of the job, in its own process group, its output pumped with a prefix."""

    def __init__(self, name, argv, env, lock):
        self.name = name
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
        prefix = f"[{name}] ".encode()
        self.pumps = [
            threading.Thread(target=_pump, args=(pipe, dst, prefix, lock), daemon=True)
            for pipe, dst in ((self.proc.stdout, sys.stdout.buffer),
                              (self.proc.stderr, sys.stderr.buffer))]
        for pump in self.pumps:
            pump.start()

    def kill_group(self, sig):
        # The group, not just the pid: whatever the child started goes too. The group
        # may outlive its leader, so it is signalled even after the child exited; its
        # id cannot be reused while any member lives.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)


class Job:
    """Starts the roles in order, watches them, and tears everything down."""

    def __init__(self, args):
        self.args = args
        self.children = []
        self._lock = threading.Lock()  # one lock for both streams keeps lines in order
        self._tmpdir = tempfile.mkdtemp(prefix="tfps-run-")
        self._deadline = time.monotonic() + args.timeout if args.timeout else None

    def run(self):
        if not os.access(self.args.ps_server, os.X_OK):
            raise LaunchError(f"ps_server not built: run `make build` "
                              f"(no executable at {self.args.ps_server})")
        port = self._start_scheduler()
        self._start_servers(port)
        workers = self._start_workers(port)
        return self._supervise(workers)

    def _spawn(self, name, argv, env=None):
        try:
            child = _Child(name, argv, env if env is not None else dict(os.environ), self._lock)
        except OSError as e:  # e.g. a typo in COMMAND: say so in one line, as a shell would
            raise LaunchError(f"cannot start {name}: {e}", 127) from None
        self.children.append(child)
        return child

    def _counts(self):
        return ["--num-workers", str(self.args.num_workers),
                "--num-servers", str(self.args.num_servers)]

    def _start_scheduler(self):
        port_file = os.path.join(self._tmpdir, "port")
        scheduler = self._spawn("scheduler", [
            self.args.ps_server, "--role", "scheduler", "--port", str(self.args.port),
            "--port-file", port_file, *self._counts()])
        give_up = time.monotonic() + _PORT_WAIT_S
        while True:
            # ps_server writes the file atomically, so a file that exists is complete.
            if os.path.exists(port_file):
                with open(port_file) as f:
                    text = f.read()
                try:
                    return int(text)
                except ValueError:
                    raise LaunchError(f"scheduler wrote {text!r} to its port file") from None
            code = scheduler.proc.poll()
            if code is not None:
                raise LaunchError(f"scheduler {_describe_exit(code)} before publishing its "
                                  f"port", _shell_code(code) or 1)
            if time.monotonic() > give_up:
                raise LaunchError(f"scheduler published no port within {_PORT_WAIT_S:g} s")
            self._sleep()

    def _start_servers(self, port):
        threads = []
        if self.args.server_threads:
            threads = ["--threads", str(self.args.server_threads)]
        for i in range(self.args.num_servers):
            self._spawn(f"server {i}", [
                self.args.ps_server, "--role", "server", "--scheduler", f"{HOST}:{port}",
                *self._counts(), *threads])

    def _start_workers(self, port):
        size = self.args.num_workers
        return [self._spawn(f"worker {rank}", self.args.command,
                            worker_env(os.environ, rank, size, self.args.num_servers, port))
                for rank in range(size)]

    def _sleep(self):
        if self._deadline is not None and time.monotonic() >= self._deadline:
            raise LaunchError(f"timed out after {self.args.timeout:g} s; "
                              "stopped all processes", 124)
        time.sleep(_POLL_S)

    def _check_exits(self):
        for child in self.children:
            code = child.proc.poll()
            if code:
                raise LaunchError(f"{child.name} {_describe_exit(code)}; stopped the others",
                                  _shell_code(code))

    def _supervise(self, workers):
        while True:
            self._check_exits()
            if all(w.proc.returncode == 0 for w in workers):
                break
            self._sleep()
        # The workers are done: give the servers and the scheduler a moment to exit on
        # their own (and so to report a failure of theirs); teardown stops the rest.
        give_up = time.monotonic() + _SERVER_EXIT_WAIT_S
        while time.monotonic() < give_up and any(c.proc.poll() is None for c in self.children):
            time.sleep(_POLL_S)
            self._check_exits()
        return 0

    def teardown(self):
        """SIGTERM every process group, SIGKILL what is left after the grace period."""
        for child in self.children:
            child.kill_group(signal.SIGTERM)
        give_up = time.monotonic() + _KILL_GRACE_S
        while time.monotonic() < give_up and any(c.proc.poll() is None for c in self.children):
            time.sleep(_POLL_S)
        for child in self.children:
            child.kill_group(signal.SIGKILL)
            child.proc.wait()
        for child in self.children:
            for pump in child.pumps:
                # A grandchild that escaped its group can hold the pipe open: don't hang on it.
                pump.join(timeout=1.0)
        shutil.rmtree(self._tmpdir, ignore_errors=True)


def _raise_terminated(signum, frame):
    raise _Terminated()


def main(argv=None):
    args = parse_args(argv)
    job = Job(args)
    previous_sigint = signal.getsignal(signal.SIGINT)
    previous_sigterm = signal.signal(signal.SIGTERM, _raise_terminated)
    message = None
    try:
        code = job.run()
    except LaunchError as e:
        message, code = str(e), e.code
    except KeyboardInterrupt:
        message, code = "interrupted; stopped all processes", 128 + signal.SIGINT
    except _Terminated:
        message, code = "terminated; stopped all processes", 128 + signal.SIGTERM
    finally:
        # A second Ctrl-C must not cut the teardown short and leave processes behind;
        # the teardown itself is bounded by the kill grace period.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        job.teardown()
        signal.signal(signal.SIGINT, previous_sigint)
        signal.signal(signal.SIGTERM, previous_sigterm)
    # Printed after the teardown, so that it is the last line and "stopped" is true.
    if message:
        print(f"tfps-run: {message}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())

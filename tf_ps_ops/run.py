"""tfps-run: start a scheduler, M parameter servers and N workers on this host.

    tfps-run -np 4 -ns 2 python3 train.py --epochs 3

Every child gets its own process group, so teardown (on failure, --timeout, Ctrl-C or
SIGTERM) kills whatever the child started too. Each output line of a child is prefixed
with its role and rank: `[worker 1] `, `[server 0] `, `[scheduler] `.

This module imports only the standard library, so the launcher starts at once; it also
runs by path (`python3 tf_ps_ops/run.py`, which is what `bin/tfps-run` does).
"""

import argparse
import os
import shutil
import signal
import sys
import tempfile

if not __package__:
    # Run by path (bin/tfps-run): the launch library is the one beside this file, not
    # whatever tf_ps_ops may be installed.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tf_ps_ops._launch_env import LOCAL_ADDRESS, Place  # noqa: E402
from tf_ps_ops._launch_env import worker_env as _place_env  # noqa: E402
from tf_ps_ops._launch_job import Job, LaunchError  # noqa: E402
from tf_ps_ops._launch_process import Prefixed  # noqa: E402

DEFAULT_PS_SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "ps_server")
HOST = LOCAL_ADDRESS  # every role of a tfps-run job lives on this host

# The scheduler binds its socket before anything else it does: seconds are plenty.
_PORT_WAIT_S = 30.0
# Servers and the scheduler exit on their own right after the last worker's goodbye;
# with workers that never called init() they never will, so don't wait long.
_SERVER_EXIT_WAIT_S = 2.0
# How long a child has between SIGTERM and SIGKILL.
_KILL_GRACE_S = 3.0


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
    """The environment of worker `rank`: ours, plus every dialect's names for its place
    (all workers share this host, so the local rank is the rank)."""
    env = _place_env(Place(rank, size, num_servers, HOST, port, rank, size), base)
    # A Python worker writing to a pipe buffers its output in blocks; prefixed lines
    # would then arrive late and out of order with the other ranks'.
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_job(job, args, port_file):
    if not os.access(args.ps_server, os.X_OK):
        raise LaunchError(f"ps_server not built: run `make build` "
                          f"(no executable at {args.ps_server})")
    env = dict(os.environ)
    port = job.start_scheduler(env, port_file, port=args.port, wait_s=_PORT_WAIT_S)
    for index in range(args.num_servers):
        job.start_server(index, env, threads=args.server_threads)
    workers = [job.start_worker(rank, args.command, worker_env(
                   os.environ, rank, args.num_workers, args.num_servers, port))
               for rank in range(args.num_workers)]
    job.supervise(workers, linger_s=_SERVER_EXIT_WAIT_S)
    return 0


def _raise_terminated(signum, frame):
    raise _Terminated()


def main(argv=None):
    args = parse_args(argv)
    job = Job(args.ps_server, args.num_workers, args.num_servers, Prefixed(),
              timeout=args.timeout)
    tmpdir = tempfile.mkdtemp(prefix="tfps-run-")
    previous_sigint = signal.getsignal(signal.SIGINT)
    previous_sigterm = signal.signal(signal.SIGTERM, _raise_terminated)
    message = None
    try:
        code = run_job(job, args, os.path.join(tmpdir, "port"))
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
        job.teardown(_KILL_GRACE_S)
        shutil.rmtree(tmpdir, ignore_errors=True)
        signal.signal(signal.SIGINT, previous_sigint)
        signal.signal(signal.SIGTERM, previous_sigterm)
    # Printed after the teardown, so that it is the last line and "stopped" is true.
    if message:
        print(f"tfps-run: {message}", file=sys.stderr, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())

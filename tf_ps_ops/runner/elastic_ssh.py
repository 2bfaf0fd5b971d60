"""The elastic driver's side of remote workers (`tfps-run --elastic -H`).

The driver's job directory (epoch.json, join-<id>, ack-<E>-<id>: elastic.py) is
on the driver's host. A worker on another host gets a folder of its own there
(remote.py), and its ssh session, which is authenticated and encrypted by ssh and
already carries the job key, carries the rest:
- each epoch the driver publishes is also sent as one line {"epoch": {...}} on the
  session's stdin (`send_epoch`), and written there as epoch.json;
- the join-<id> and ack-<E>-<id> files the worker makes there come back as marked lines
  on the session's stdout, which `RelayOutput` turns into the same files in the driver's
  directory. Only names of the worker's own id are taken.
So nothing listens anywhere for it, and the driver works on the same files as for local
workers. A worker's exit code comes back as ssh's (128+N when killed by signal N; 255:
ssh itself failed, the host or the connection is lost). Standard library only.
"""

import json
import os
import re
import subprocess
import sys
import threading

from tf_ps_ops.runner.process import Prefixed, describe_exit

RELAY_MARK = b"\x1etfps-elastic "  # remote.RELAY_MARK
SSH_FAILED = 255


class RelayOutput(Prefixed):
    """Prefixed output that takes the relay lines of remote elastic workers out of their
    stdout and makes the files they name in `directory`."""

    def __init__(self, directory, timestamps=False, log_dir=None):
        super().__init__(log_dir, timestamps=timestamps)
        self.directory = directory

    def start(self, process, popen):
        if process.role != "worker" or not getattr(process.host, "remote", False):
            return super().start(process, popen)
        child = popen(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        prefix = f"[{process.name}] ".encode()
        stdout = _Filter(child.stdout, lambda name: self._relayed(process, name))
        pumps = [threading.Thread(target=self._pump, args=(pipe, dst, prefix), daemon=True)
                 for pipe, dst in ((stdout, sys.stdout.buffer),
                                   (child.stderr, sys.stderr.buffer))]
        for pump in pumps:
            pump.start()
        self._pumps[process] = pumps
        return child

    def _relayed(self, process, name):
        worker_id = re.escape(str(process.index))
        if re.fullmatch(rf"join-{worker_id}|ack-\d+-{worker_id}", name):
            with open(os.path.join(self.directory, name), "w"):
                pass


class _Filter:
    """A readable stream of lines without the relay lines, which go to `take(name)`."""

    def __init__(self, src, take):
        self.src, self.take = src, take

    def readline(self):
        while True:
            line = self.src.readline()
            if not line.startswith(RELAY_MARK):
                return line
            self.take(line[len(RELAY_MARK):].strip().decode(errors="replace"))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.src.close()


def send_epoch(process, epoch):
    """Sends `epoch` (the dict of epoch.json) to a remote worker; False when its session
    is gone (its exit tells why)."""
    stdin = process.popen.stdin
    if stdin is None or process.poll() is not None:
        return False
    try:  # a few hundred bytes: fits the pipe; the far end reads stdin all the time
        stdin.write((json.dumps({"epoch": epoch}) + "\n").encode())
        stdin.flush()
    except (BrokenPipeError, ValueError, OSError):
        return False
    return True


def describe_remote_exit(process, code):
    """How a process ended, in words, for one started over ssh."""
    if not getattr(process.host, "remote", False) or code < 0:
        return describe_exit(code)
    where = f"on {process.host.name}"
    if code == SSH_FAILED:
        return (f"lost its ssh session to {process.host.name} (ssh exit 255: the host or "
                f"the connection is lost)")
    if 128 < code < 128 + 65:
        return f"{describe_exit(128 - code)} {where}"
    return f"{describe_exit(code)} {where}"


def keepalive_options(heartbeat_timeout_s):
    """ssh options under which a session to a host that stopped answering ends (exit
    255) within about the job's heartbeat timeout: the driver then loses its workers."""
    interval = max(1, int(heartbeat_timeout_s / 3))
    return ["-o", f"ServerAliveInterval={interval}", "-o", "ServerAliveCountMax=3",
            "-o", f"ConnectTimeout={max(5, int(heartbeat_timeout_s))}"]


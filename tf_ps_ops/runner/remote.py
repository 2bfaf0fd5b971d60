"""The far end of an ssh launch: runs one process of a job on a remote host.

tfps-run does not install this on the remote hosts: it sends this file's source as
`python3 -c SOURCE` (see ssh.py), so it imports nothing but the standard library.
The process to run arrives as one JSON line on stdin ({"argv", "env", "cwd"}), which keeps
the environment (and any secret in it) off every command line. After that line stdin
stays open: its end-of-file means the launcher or its ssh session is gone, and then the
process's whole group is stopped (SIGTERM, SIGKILL after a grace period). A job key
("auth_key") is written to a private temporary file (mode 600, in a mode-700 folder) that
the process finds in TFPS_AUTH_KEY_FILE, and removed when the process ends. ssh without a
terminal sends no signal when the session closes, so this is what makes a teardown or a
lost connection reach the remote processes. Exits with the process's exit code (128+N
when killed by signal N), which ssh hands back.

An elastic worker ("elastic_relay" in the spec; `tfps-run --elastic -H`) gets a private
folder of its own here as TFPS_ELASTIC_DIR, since the driver's job directory is on the
driver's host. The ssh session carries it both ways (elastic_ssh.py): each further
stdin line {"epoch": {...}} is written there as epoch.json, atomically; the join-<id> and
ack-<E>-<id> files the worker makes there go back as `RELAY_MARK name` lines on stdout,
between whole lines of the worker's own output, which this wrapper relays (a worker line
that begins with the mark gets a space first, so the worker cannot forge one).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

GRACE_S = 3.0
RELAY_MARK = b"\x1etfps-elastic "  # elastic_ssh.RELAY_MARK
_RELAY_POLL_S = 0.05


def _stop(child, lock):
    # Non-blocking: a second signal while a stop is under way must not deadlock on it.
    if not lock.acquire(blocking=False):
        return
    try:
        if child.poll() is not None:
            return
        try:
            os.killpg(child.pid, signal.SIGTERM)
        except OSError:
            return
        give_up = time.monotonic() + GRACE_S
        while child.poll() is None and time.monotonic() < give_up:
            time.sleep(0.05)
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except OSError:
            pass
    finally:
        lock.release()


def _write_key(text):
    """The job key in a fresh private folder; returns (folder, file)."""
    folder = tempfile.mkdtemp(prefix="tfps-key-")  # mode 700
    path = os.path.join(folder, "job.key")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return folder, path


def main():
    spec = json.loads(sys.stdin.buffer.readline())
    env = dict(os.environ)
    env.update(spec["env"])
    key_folder = relay = None
    if "auth_key" in spec:
        key_folder, env["TFPS_AUTH_KEY_FILE"] = _write_key(spec["auth_key"])
    if spec.get("elastic_relay"):
        relay = _Relay()
        env["TFPS_ELASTIC_DIR"] = relay.folder
    try:
        code = _run(spec, env, relay)
    finally:
        if key_folder is not None:
            shutil.rmtree(key_folder, ignore_errors=True)
        if relay is not None:
            shutil.rmtree(relay.folder, ignore_errors=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # Not sys.exit: the stdin watcher still blocks in read(), and the interpreter's
    # shutdown would abort on the buffer lock that thread holds.
    os._exit(code)


class _Relay:
    """An elastic worker's side of the driver's job directory (see the module doc)."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="tfps-eworker-")  # mode 700
        self.lock = threading.Lock()  # whole lines on stdout
        self.reported = set()

    def write_epoch(self, line):
        """A stdin line from the driver: the epoch to publish here (anything else is
        ignored: only the driver writes to this stdin)."""
        try:
            epoch = json.loads(line)["epoch"]
            number = int(epoch["epoch"])
        except (ValueError, KeyError, TypeError):
            return
        path = os.path.join(self.folder, "epoch.json")
        tmp = f"{path}.{number}.tmp"
        with open(tmp, "w") as f:
            json.dump(epoch, f)
        os.replace(tmp, path)

    def _say(self, line):
        with self.lock:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()

    def report_new_files(self):
        try:
            names = os.listdir(self.folder)
        except OSError:
            return
        for name in sorted(names):
            if name.startswith(("join-", "ack-")) and name not in self.reported:
                self.reported.add(name)
                self._say(RELAY_MARK + name.encode(errors="replace") + b"\n")

    def watch(self, child):
        while child.poll() is None:
            self.report_new_files()
            time.sleep(_RELAY_POLL_S)

    def pump(self, src):
        """Relays the worker's stdout, line by line."""
        with src:
            for line in iter(src.readline, b""):
                if line.startswith(RELAY_MARK):
                    line = b" " + line
                try:
                    self._say(line)
                except (BrokenPipeError, ValueError):
                    pass  # the session is gone; keep draining so the worker never blocks


def _run(spec, env, relay=None):
    """Runs the process to its end; its exit code as a shell reports it."""
    cwd = spec.get("cwd")
    if cwd and not os.path.isdir(cwd):
        print(f"tfps-run: no directory {cwd} on this host; running in {os.getcwd()}",
              file=sys.stderr, flush=True)
        cwd = None
    try:
        child = subprocess.Popen(spec["argv"], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                 start_new_session=True,
                                 stdout=None if relay is None else subprocess.PIPE)
    except OSError as e:
        print(f"tfps-run: cannot start {spec['argv'][0]}: {e}", file=sys.stderr, flush=True)
        return 127
    lock = threading.Lock()

    def watch_stdin():
        if relay is None:
            sys.stdin.buffer.read()  # returns at end-of-file only
        else:
            for line in iter(sys.stdin.buffer.readline, b""):
                relay.write_epoch(line)
        _stop(child, lock)

    threading.Thread(target=watch_stdin, daemon=True).start()
    pumps = []
    if relay is not None:
        pumps = [threading.Thread(target=relay.pump, args=(child.stdout,), daemon=True),
                 threading.Thread(target=relay.watch, args=(child,), daemon=True)]
        for thread in pumps:
            thread.start()
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, lambda *_: _stop(child, lock))
    code = child.wait()
    try:  # whatever the process left running in its group goes with it
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:
        pass
    for thread in pumps:
        thread.join(timeout=1.0)
    if relay is not None:
        relay.report_new_files()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    main()

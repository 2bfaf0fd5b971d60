"""The far end of an ssh launch: runs one process of a job on a remote host.

tfps-run does not install this on the remote hosts: it sends this file's source as
`python3 -c SOURCE` (see _launch_ssh.py), so it imports nothing but the standard library.
The process to run arrives as one JSON line on stdin ({"argv", "env", "cwd"}), which keeps
the environment (and any secret in it) off every command line. After that line stdin
stays open: its end-of-file means the launcher or its ssh session is gone, and then the
process's whole group is stopped (SIGTERM, SIGKILL after a grace period). ssh without a
terminal sends no signal when the session closes, so this is what makes a teardown or a
lost connection reach the remote processes. Exits with the process's exit code (128+N
when killed by signal N), which ssh hands back.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

GRACE_S = 3.0


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


def main():
    spec = json.loads(sys.stdin.buffer.readline())
    env = dict(os.environ)
    env.update(spec["env"])
    cwd = spec.get("cwd")
    if cwd and not os.path.isdir(cwd):
        print(f"tfps-run: no directory {cwd} on this host; running in {os.getcwd()}",
              file=sys.stderr, flush=True)
        cwd = None
    try:
        child = subprocess.Popen(spec["argv"], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
    except OSError as e:
        print(f"tfps-run: cannot start {spec['argv'][0]}: {e}", file=sys.stderr, flush=True)
        sys.exit(127)
    lock = threading.Lock()

    def watch_stdin():
        sys.stdin.buffer.read()  # returns at end-of-file only
        _stop(child, lock)

    threading.Thread(target=watch_stdin, daemon=True).start()
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, lambda *_: _stop(child, lock))
    code = child.wait()
    try:  # whatever the process left running in its group goes with it
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    # Not sys.exit: the stdin watcher still blocks in read(), and the interpreter's
    # shutdown would abort on the buffer lock that thread holds.
    os._exit(128 - code if code < 0 else code)


if __name__ == "__main__":
    main()

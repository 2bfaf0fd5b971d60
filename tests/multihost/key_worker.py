"""Worker for test_ssh_job_key.py: reports the job key it was given (where, its mode, a
digest, and whether its text is on any process's command line), then push_pulls once
under it and checks the sum against NumPy. Prints "key ..." and "ok"."""

import hashlib
import os
import stat
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from native import init_from_env, load_core  # noqa: E402


def on_command_lines(secret):
    found = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                found += secret in f.read()
        except OSError:
            pass
    return found


def main():
    path = os.environ["TFPS_AUTH_KEY_FILE"]
    with open(path, "rb") as f:
        secret = f.read().strip()
    mode = stat.S_IMODE(os.stat(path).st_mode)
    digest = hashlib.sha256(secret).hexdigest()[:16]
    print(f"key {path} mode {mode:o} digest {digest} cmdline {on_command_lines(secret)}",
          flush=True)
    core = load_core()
    rank, size = init_from_env(core)
    got = core.push_pull("keyed", np.full(1000, rank + 1.0, np.float32))
    assert np.all(got == sum(r + 1.0 for r in range(size))), got[:3]
    core.shutdown()
    print("ok", flush=True)


if __name__ == "__main__":
    main()

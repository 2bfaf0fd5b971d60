"""Standard library only: SIGKILL a server of the elastic epoch a worker runs in, the test's
deterministic way to lose a server at a chosen step (tests/multiprocess/test_elastic.py).

    python kill_server.py [stop]  (as an elastic worker: kills one server, or SIGSTOPs it,
                                   then waits for the driver's answer: a new epoch, or
                                   the end of the job)
"""

import json
import os
import signal
import sys
import time


def epoch_file():
    return os.path.join(os.environ["TFPS_ELASTIC_DIR"], "epoch.json")


def kill_a_server(sig=signal.SIGKILL):
    """Sends `sig` to the first-started server of the current epoch (found by its command
    line: the epoch's scheduler address); returns that epoch's number."""
    with open(epoch_file()) as f:
        epoch = json.load(f)
    scheduler = epoch["scheduler"].encode()
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"--role" in argv and argv[argv.index(b"--role") + 1] == b"server" and \
                b"--scheduler" in argv and argv[argv.index(b"--scheduler") + 1] == scheduler:
            pids.append(int(entry))
    if not pids:
        raise RuntimeError(f"no server of scheduler {scheduler} found")
    os.kill(min(pids), sig)
    return int(epoch["epoch"])


if __name__ == "__main__":
    # Only the first worker kills; every worker exits 0 once the driver published a newer
    # epoch (or is stopped by the driver when the job ends).
    deadline = time.monotonic() + 50
    while not os.path.exists(epoch_file()) and time.monotonic() < deadline:
        time.sleep(0.05)
    how = signal.SIGSTOP if sys.argv[1:] == ["stop"] else signal.SIGKILL
    killed = kill_a_server(how) if os.environ["TFPS_ELASTIC_ID"] == "w0" else 0
    while time.monotonic() < deadline:
        with open(epoch_file()) as f:
            if json.load(f)["epoch"] > killed:
                print(f"{os.environ['TFPS_ELASTIC_ID']}: a new epoch", flush=True)
                sys.exit(0)
        time.sleep(0.05)
    sys.exit(3)

"""Counts this worker's TCP sockets after a push_pull (the peer mesh must not be connected
yet) and after an allgather (one outgoing and one accepted connection per peer), checking
both collectives against NumPy. Prints "sockets BEFORE AFTER"; exits 0 when the checks
passed."""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from native import init_from_env, load_core  # noqa: E402


def tcp_sockets():
    """Inodes of this process's TCP sockets (from /proc/net/tcp{,6} and its fds)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if os.path.exists(table):
            with open(table) as f:
                inodes.update(line.split()[9] for line in list(f)[1:])
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            mine.add(target)
    return len(mine)


def barrier(core, name, size):
    """A push_pull every worker waits on (checked against NumPy)."""
    got = core.push_pull(name, np.ones(1, np.float32))
    np.testing.assert_array_equal(got, np.full(1, size, np.float32))


def main():
    core = load_core()
    rank, size = init_from_env(core)
    got = core.push_pull("x", np.full(4, rank + 1, np.float32))
    np.testing.assert_array_equal(got, np.full(4, size * (size + 1) / 2, np.float32))
    time.sleep(0.5)  # any connection a peer would open at the rendezvous is up by now
    before = tcp_sockets()
    barrier(core, "counted before", size)  # no peer starts its allgather before this
    parts = core.allgather("ranks", np.array([rank], np.int32))
    assert [int(p[0]) for p in parts] == list(range(size)), parts
    # Every peer's part reached us over its connection; ours to each peer were opened for
    # our part. The count is read until it is complete (or 10 s have passed): ZeroMQ's
    # I/O thread accepts and closes connections on its own time.
    want, limit = before + 2 * (size - 1), time.monotonic() + 10
    after = tcp_sockets()
    while after != want and time.monotonic() < limit:
        time.sleep(0.1)
        after = tcp_sockets()
    barrier(core, "counted after", size)  # no peer closes its connections before this
    print(f"sockets {before} {after}", flush=True)
    core.shutdown()


if __name__ == "__main__":
    main()

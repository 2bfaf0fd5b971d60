"""The tfps-* names in /dev/shm, for tests that check a job leaves none behind.

/dev/shm is shared with every other job on the machine (CI runs one suite, a developer
may run several). Each name is a pointer file "tfps-memfd <pid> <fd> <inode>" written by
its creator (tf_ps_ops/cc/transport/shm_segment.h), so a name whose creator is still
alive after the test's own processes have exited belongs to another job and is not a
leftover of this one.
"""

import os


def shm_segments():
    return sorted(p for p in os.listdir("/dev/shm") if p.startswith("tfps-"))


def _creator_alive(name):
    try:
        with open(os.path.join("/dev/shm", name)) as f:
            fields = f.read(128).split()
        pid = int(fields[1]) if len(fields) == 4 and fields[0] == "tfps-memfd" else 0
    except (OSError, ValueError):
        return False  # gone meanwhile counts below as not left; unreadable as left
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def leftovers(before):
    """Names that appeared since `before` (a shm_segments() list) and whose creator is
    gone: what the job under test left behind."""
    old = set(before)
    return [n for n in shm_segments()
            if n not in old and os.path.exists(os.path.join("/dev/shm", n))
            and not _creator_alive(n)]

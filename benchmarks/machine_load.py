"""CPU used by processes that are not ours, for benchmarks that must not be disturbed:
the machine's busy seconds and this driver's own (with its reaped children), the cores
others use while we run nothing, waiting until they drop below a limit, and whether a
timed window counts as clean (train_bench.py, compression_step_time.py,
algorithms_bench.py).
"""

import os
import resource
import time

MIN_WINDOW_S = 0.5  # shorter windows (smoke runs) are not judged for contamination


def machine_busy_s():
    with open("/proc/stat") as f:
        user, nice, system = (int(v) for v in f.readline().split()[1:4])
    return (user + nice + system) / os.sysconf("SC_CLK_TCK")


def own_cpu_s():
    """CPU of this driver and every child it reaped (workers, servers, ip, tc)."""
    return sum(getattr(resource.getrusage(who), field)
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for field in ("ru_utime", "ru_stime"))


def other_load(seconds=2.0):
    """Cores used by other processes while we run nothing."""
    busy, ours, t = machine_busy_s(), own_cpu_s(), time.monotonic()
    time.sleep(seconds)
    return max(0.0, (machine_busy_s() - busy - (own_cpu_s() - ours))
               / (time.monotonic() - t))


def wait_for_idle(limit, patience):
    """Waits (up to `patience` s) until others use less than `limit` cores; returns the
    last measurement."""
    deadline = time.monotonic() + patience
    load = other_load()
    while load > limit and time.monotonic() < deadline:
        print("  machine busy (others use %.2f cores), waiting..." % load, flush=True)
        time.sleep(10)
        load = other_load()
    return load


def clean(row, args):
    return not row["judged"] or row["other_cores"] <= args.other_limit

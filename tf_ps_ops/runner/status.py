"""tfps-run's metrics ports and status line (docs/metrics.md).

`--metrics-port BASE` gives every process of the job a port of its own, the same on
whichever host it runs, so that a Prometheus configuration can list them:

    scheduler BASE,  server i BASE + 1 + i,  worker rank r BASE + 1 + servers + r

With --elastic, a worker's port comes from its *slot*, not its rank: the driver gives each
new worker the lowest slot k whose last holder has exited (a replacement thus gets the port
of the worker it replaces) and port BASE + 1 + servers + k. Each epoch has a scheduler and
servers of its own, and the previous epoch's may still run when the next starts, so there
are two sets of ports for them: the first above, the second after the workers' (scheduler
BASE + 1 + servers + slots, server i one more + i); an epoch takes a set no running epoch
holds (ElasticPorts).

`--status-every S` prints one line every S seconds, from a scrape of every worker:

    tfps-run status: steps/s 12.1 (rank 0) 11.8 (rank 1) | MB/s 35.2 (localhost) | slowest rank 1
"""

import sys
import threading
import time

from tf_ps_ops.common import metrics_text

STEPS = "tfps_worker_steps_total"


def metrics_ports(base, num_servers, num_workers):
    """{(role, index): port} of a job's processes under the rule above."""
    ports = {("scheduler", 0): base}
    ports.update({("server", i): base + 1 + i for i in range(num_servers)})
    ports.update({("worker", r): base + 1 + num_servers + r for r in range(num_workers)})
    return ports


def with_port(env, ports, role, index):
    """`env` with TFPS_METRICS_PORT set to `ports[(role, index)]` (`ports` None: `env`)."""
    if ports is None:
        return env
    return {**env, "TFPS_METRICS_PORT": str(ports[(role, index)])}


def check_ports(base, num_servers, num_workers, elastic=False):
    """An error message when the job's ports do not fit below 65536, else None
    (`num_workers`: with `elastic`, the worker slots)."""
    count = (2 if elastic else 1) * (1 + num_servers) + num_workers
    last = base + count - 1
    if base > 0 and last > 65535:
        what = (f"{'two sets of ' if elastic else ''}scheduler and {num_servers} server(s), "
                f"{num_workers} worker{' slot' if elastic else ''}(s)")
        return (f"--metrics-port {base} needs ports up to {last} ({what}); give a base at "
                f"most {65536 - count}")
    return None


class ElasticPorts:
    """The metrics ports of an elastic job (the module doc): `slots` worker slots after
    BASE's scheduler and `num_servers` servers, then the second set of control ports.
    Called from the driver's thread only; `port(worker_id)` from any thread."""

    def __init__(self, base, num_servers, slots):
        self.base, self.num_servers, self.slots = base, num_servers, slots
        self._holders = [None] * slots  # slot -> worker id
        self._ports = {}  # worker id -> port

    def control(self, busy):
        """(set, {("scheduler", 0): port, ("server", i): port}) for a new epoch, taking a
        set not in `busy` (the sets running epochs hold); set None and every port 0 (each
        role picks one and logs it) when both are busy, or with BASE 0."""
        free = [k for k in (0, 1) if k not in busy]
        if self.base == 0 or not free:
            return None, {("scheduler", 0): 0,
                          **{("server", i): 0 for i in range(self.num_servers)}}
        first = self.base + free[0] * (1 + self.num_servers + self.slots)
        ports = {("scheduler", 0): first}
        ports.update({("server", i): first + 1 + i for i in range(self.num_servers)})
        return free[0], ports

    def take(self, worker_id, alive):
        """The port of new worker `worker_id`: the lowest slot whose holder `alive(id)`
        says has exited; 0 (the worker picks one and logs it) when none is free."""
        port = 0
        if self.base > 0:
            for k, holder in enumerate(self._holders):
                if holder is None or not alive(holder):
                    self._holders[k] = worker_id
                    port = self.base + 1 + self.num_servers + k
                    break
        self._ports[worker_id] = port
        return port

    def port(self, worker_id):
        return self._ports.get(worker_id, 0)


class StatusLine:
    """Scrapes `workers` [(rank, host, port)] every `every_s` seconds on a thread of its
    own and prints the line; a worker that does not answer (not started yet, finished)
    shows as '-'."""

    def __init__(self, workers, every_s, out=None, scrape=metrics_text.scrape):
        """`workers`: a list, or a callable returning the list each time (an elastic
        job's members change)."""
        self.workers = workers if callable(workers) else (lambda: list(workers))
        self.every_s = every_s
        self.out = out or sys.stderr
        self._scrape = scrape
        self._last = {}  # (host, port) -> (time, steps, bytes)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tfps-run status", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=self.every_s + 5)

    def _run(self):
        self.sample()  # the baseline
        while not self._stop.wait(self.every_s):
            line = self.line(self.sample())
            print(line, file=self.out, flush=True)

    def sample(self):
        """{rank: (steps/s, bytes/s, host)} since the previous sample; None for a rank
        that did not answer or has no previous sample."""
        rates = {}
        for rank, host, port in self.workers():
            try:
                samples = metrics_text.parse(self._scrape(host, port))
            except (OSError, ValueError):
                rates[rank] = None
                continue
            now = (time.monotonic(), samples.get(STEPS, 0.0), metrics_text.bytes_moved(samples))
            before = self._last.get((host, port))
            self._last[(host, port)] = now
            # Fewer steps than before: a new process on the port (an elastic replacement).
            if before is None or now[0] <= before[0] or now[1] < before[1]:
                rates[rank] = None
                continue
            seconds = now[0] - before[0]
            rates[rank] = ((now[1] - before[1]) / seconds, (now[2] - before[2]) / seconds, host)
        return rates

    @staticmethod
    def line(rates):
        steps = " ".join(f"{'-' if r is None else f'{r[0]:.1f}'} (rank {rank})"
                         for rank, r in sorted(rates.items()))
        hosts = {}
        for r in rates.values():
            if r is not None:
                hosts[r[2]] = hosts.get(r[2], 0.0) + r[1]
        mbs = " ".join(f"{b / 1e6:.1f} ({host})" for host, b in sorted(hosts.items())) or "-"
        known = [(r[0], rank) for rank, r in rates.items() if r is not None]
        slowest = f"rank {min(known)[1]}" if known else "-"
        return f"tfps-run status: steps/s {steps} | MB/s {mbs} | slowest {slowest}"

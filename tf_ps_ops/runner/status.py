"""tfps-run's metrics ports and status line (docs/metrics.md).

`--metrics-port BASE` gives every process of the job a port of its own, the same on
whichever host it runs, so that a Prometheus configuration can list them:

    scheduler BASE,  server i BASE + 1 + i,  worker rank r BASE + 1 + servers + r

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


def check_ports(base, num_servers, num_workers):
    """An error message when the job's ports do not fit below 65536, else None."""
    last = base + num_servers + num_workers
    if base > 0 and last > 65535:
        return (f"--metrics-port {base} needs ports up to {last} (one per process: "
                f"scheduler, {num_servers} server(s), {num_workers} worker(s)); give a "
                f"base at most {65535 - num_servers - num_workers}")
    return None


class StatusLine:
    """Scrapes `workers` [(rank, host, port)] every `every_s` seconds on a thread of its
    own and prints the line; a worker that does not answer (not started yet, finished)
    shows as '-'."""

    def __init__(self, workers, every_s, out=None, scrape=metrics_text.scrape):
        self.workers = list(workers)
        self.every_s = every_s
        self.out = out or sys.stderr
        self._scrape = scrape
        self._last = {}  # rank -> (time, steps, bytes)
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
        for rank, host, port in self.workers:
            try:
                samples = metrics_text.parse(self._scrape(host, port))
            except (OSError, ValueError):
                rates[rank] = None
                continue
            now = (time.monotonic(), samples.get(STEPS, 0.0), metrics_text.bytes_moved(samples))
            before = self._last.get(rank)
            self._last[rank] = now
            if before is None or now[0] <= before[0]:
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

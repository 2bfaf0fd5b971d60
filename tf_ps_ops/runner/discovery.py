"""Host discovery for elastic jobs that grow and shrink (`tfps-run --host-discovery-script`).

The user's script prints the hosts that may run workers now, one a line, as horovodrun's:
`host` (`--slots` slots, default 1) or `host:slots`; blank lines and `#` comments are
skipped; an empty output means no host right now. The driver (elastic_growth.py) runs it
every INTERVAL_S, in the background (its child is polled, never waited for), and kills a
run that takes longer than SCRIPT_TIMEOUT_S. The script runs through the shell, so
`--host-discovery-script "./hosts.sh --zone a"` works as with horovodrun.

Also the flags (`add_flags`, `check_args`), so that run.py only calls two functions.
Standard library only, as the rest of the launcher.
"""

import os
import signal
import subprocess
import time

from tf_ps_ops.runner.flag_types import int_at_least, positive_float

INTERVAL_S = 1.0
SCRIPT_TIMEOUT_S = 10.0
_STDERR_TAIL = 2000


class DiscoveryError(Exception):
    """The script failed, timed out, or printed something that is not a host list."""


def parse_hosts_output(text, default_slots, source):
    """[(host, slots)] in the order printed, from the script's output."""
    hosts = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{source}: output line {number} {raw.strip()!r}"
        if line.startswith("["):  # [::1]:2
            host, _, rest = line[1:].partition("]")
            count = rest[1:] if rest.startswith(":") else None
        elif line.count(":") == 1:
            host, count = line.split(":")
        else:  # a bare name, or an IPv6 address without a count
            host, count = line, None
        if not host or any(c.isspace() for c in host):
            raise DiscoveryError(f"{where}: expected `host` or `host:slots`, one host a line")
        if count is None:
            slots = default_slots
        elif count.isdigit() and int(count) >= 0:
            slots = int(count)
        else:
            raise DiscoveryError(f"{where}: slots must be a whole number (`host:slots`)")
        if host in (h for h, _ in hosts):
            raise DiscoveryError(f"{where}: host {host} is listed twice")
        if slots:
            hosts.append((host, slots))
    return hosts


def describe(hosts):
    """`localhost:2, node1:1 (3 slots)` for a log line."""
    if not hosts:
        return "no host"
    total = sum(slots for _, slots in hosts)
    return f"{', '.join(f'{h}:{s}' for h, s in hosts)} ({total} slot(s))"


class HostDiscovery:
    """Runs the discovery script now and then; `poll()` is called from the driver's loop."""

    def __init__(self, script, default_slots, directory, interval_s=INTERVAL_S,
                 timeout_s=SCRIPT_TIMEOUT_S):
        self.script, self.default_slots = script, default_slots
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self._out = os.path.join(directory, "discovery.out")
        self._err = os.path.join(directory, "discovery.err")
        self._child = None
        self._started = 0.0
        self._next = 0.0

    def _start(self):
        with open(self._out, "wb") as out, open(self._err, "wb") as err:
            self._child = subprocess.Popen(self.script, shell=True, stdin=subprocess.DEVNULL,
                                           stdout=out, stderr=err, start_new_session=True)
        self._started = time.monotonic()

    def poll(self):
        """None while nothing new; else the hosts of a run that just ended. Starts a run
        when one is due. Raises DiscoveryError for a failed run (the next is due later)."""
        now = time.monotonic()
        if self._child is None:
            if now < self._next:
                return None
            self._start()
        code = self._child.poll()
        if code is None:
            if now - self._started < self.timeout_s:
                return None
            self.stop()
            self._next = now + self.interval_s
            raise DiscoveryError(f"host discovery script {self.script!r} did not finish in "
                                 f"{self.timeout_s:g} s; killed it")
        self._child = None
        self._next = now + self.interval_s
        with open(self._out, errors="replace") as f:
            out = f.read()
        if code != 0:
            with open(self._err, errors="replace") as f:
                err = f.read().strip()[-_STDERR_TAIL:]
            how = f"exited with code {code}" if code > 0 else f"was killed by signal {-code}"
            raise DiscoveryError(f"host discovery script {self.script!r} {how}"
                                 + (f"; its stderr: {err}" if err else " (no stderr)"))
        return parse_hosts_output(out, self.default_slots,
                                  f"host discovery script {self.script!r}")

    def find(self):
        """Runs the script now and waits for its hosts (at most its timeout)."""
        self._next = 0.0
        while True:
            hosts = self.poll()
            if hosts is not None:
                return hosts
            time.sleep(0.02)

    def stop(self):
        if self._child is not None and self._child.poll() is None:
            try:
                os.killpg(self._child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._child.wait()
        self._child = None


# --- the flags (run.py) -----------------------------------------------------------------

def add_flags(parser):
    """horovodrun's elastic flags that grow and shrink a job (docs/elastic.md)."""
    group = parser.add_argument_group("elastic jobs that grow and shrink (horovodrun's flags)")
    group.add_argument("--host-discovery-script", metavar="S",
                       help="implies --elastic: a command printing the hosts available now, "
                            "`host` or `host:slots` a line, run every ~1 s; new slots get new "
                            "workers (up to --max-np), a host that is gone loses its workers; "
                            "hosts other than localhost are reached over ssh")
    group.add_argument("--min-np", "--min-num-proc", dest="min_np", type=int_at_least(1),
                       metavar="N", help="with a discovery script: workers needed to start and "
                                         "to go on (default -np); fewer wait up to "
                                         "--elastic-timeout")
    group.add_argument("--max-np", "--max-num-proc", dest="max_np", type=int_at_least(1),
                       metavar="N", help="with a discovery script: never more workers than N "
                                         "(default: as many as the slots)")
    group.add_argument("--slots", "--slots-per-host", dest="slots", type=int_at_least(1),
                       metavar="N", help="with a discovery script: slots of a host printed "
                                         "without a count (default 1)")
    group.add_argument("--elastic-timeout", type=positive_float, default=600.0, metavar="S",
                       help="with a discovery script: how long the job waits for --min-np "
                            "slots, at the start or after losing workers (default 600)")


def check_args(parser, args):
    """Checks the flags together; with a script: sets args.elastic, args.min_np and
    args.num_workers (the workers needed to start)."""
    if args.host_discovery_script is None:
        for flag, value in (("--min-np", args.min_np), ("--max-np", args.max_np),
                            ("--slots", args.slots)):
            if value is not None:
                parser.error(f"{flag} needs --host-discovery-script (with a fixed set of "
                             "workers use --elastic and --elastic-min-workers)")
        return
    if args.host_slots is not None:
        parser.error("give --host-discovery-script or -H/--hostfile, not both: the script "
                     "says which hosts the job has")
    args.elastic = True
    args.min_np = args.min_np or args.num_workers
    if args.min_np is None:
        parser.error("--host-discovery-script needs -np N or --min-np N: the number of "
                     "workers needed to start")
    if args.max_np is not None and args.max_np < args.min_np:
        parser.error(f"--max-np {args.max_np} is less than --min-np/-np {args.min_np}")
    if args.num_workers is None:
        args.num_workers = args.min_np
    args.slots = args.slots or 1

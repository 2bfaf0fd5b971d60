"""An elastic job whose hosts come from a discovery script: it grows and shrinks.

`tfps-run --host-discovery-script S --min-np N [--max-np X]` (docs/elastic.md). The
epochs, joins and acks are elastic.py's; this adds where the workers come from:

- At the start the driver runs the script until its slots reach --min-np (at most
  --elastic-timeout; a failing first run ends the job at once) and starts
  min(slots, --max-np) workers, the first epoch.
- Then it runs the script about every second (discovery.py; a failing run is logged and
  the hosts stay as last found). A slot no worker holds gets a new worker, up to
  --max-np: it announces itself (join-<id>) and the members take it in at their next
  commit (elastic.py's _admit_joiners), where elastic.run syncs it from rank 0.
- A host that is gone, or that has fewer slots than workers, loses workers: those still
  joining first, then the members of highest rank. The driver SIGTERMs them (SIGKILL
  after _STOP_GRACE_S); each exit is a membership change, not a failure, and spends no
  --elastic-restarts: the others restore their last commit and go on without it.
- A worker that dies on its own spends a restart (--elastic-restarts), and its slot gets
  a new worker at once; with none left, the job's capacity is one slot less for good, so
  that a command that keeps crashing does not restart for ever.
- Fewer members than --min-np (workers lost, hosts gone): the members go on training
  (their elastic.run waits only 30 s for an epoch, so the driver cannot hold them) while
  the driver waits up to --elastic-timeout for slots to bring the job back to --min-np;
  then it fails naming what the script found. No member left at all ends the job at once:
  nobody holds the training state.

Hosts: a name of this machine (localhost, 127.0.0.1, ::1) runs its workers here, any
other name over ssh, as with -H (their epochs, joins and acks travel in their ssh
sessions: elastic_ssh.py). Each epoch's scheduler and servers run on the driver's machine,
as horovodrun's rendezvous does: on loopback while every member of the epoch is here, at
this machine's address toward the remote hosts (or --network-interface's) once one is
not. A remote host some ssh session to which failed (exit 255) is lost: no new worker goes
there, even if the script still names it.
"""

import signal
import time

from tf_ps_ops.runner.discovery import DiscoveryError, describe
from tf_ps_ops.runner.elastic import ElasticJob, _say
from tf_ps_ops.runner.job import LaunchError
from tf_ps_ops.runner.process import LOCAL, Host
from tf_ps_ops.runner.ssh import is_local

_STOP_GRACE_S = 10.0


class GrowingElasticJob(ElasticJob):
    """ElasticJob whose workers follow the hosts of `discovery` (a HostDiscovery)."""

    def __init__(self, *args, discovery, min_np, max_np=None, elastic_timeout=600.0,
                 remote_host=None, address_toward=None, **kwargs):
        """`remote_host(name) -> Host`: how workers reach a host that is not this machine
        (None: only this machine's names are taken); `address_toward(name)`: this
        machine's address for processes on remote host `name`."""
        super().__init__(*args, **kwargs)
        self.remote_host, self.address_toward = remote_host, address_toward
        self._hosts_by_name = {}  # discovered name -> its Host
        self._epoch_members = []
        self.discovery, self.min_np, self.max_np = discovery, min_np, max_np
        self.elastic_timeout = elastic_timeout
        self.hosts = []  # [(name, slots)] as last found, hosts in the order first seen
        self._slot_host = {}  # worker id -> the discovered host name it runs on
        self._stopping = {}  # worker id -> when the driver sent it SIGTERM
        self._capacity_lost = 0
        self._below_since = None
        self._driver_hosts = {}  # remote host name -> this machine's Host toward it

    # --- hosts ------------------------------------------------------------------------

    def _take_hosts(self, found):
        """Keeps the order in which hosts were first seen (older hosts, lower ranks)."""
        names = [h for h, _ in found]
        remote = [h for h in names if not is_local(h)]
        if remote and self.remote_host is None:
            raise DiscoveryError(f"host discovery script {self.discovery.script!r} named "
                                 f"{', '.join(remote)}: only this machine's hosts "
                                 "(localhost, 127.0.0.1) are supported with a discovery "
                                 "script for now; use -H for remote hosts")
        slots = dict(found)
        old = [h for h, _ in self.hosts if h in slots]
        hosts = [(h, slots[h]) for h in old + [h for h in names if h not in old]]
        if hosts != self.hosts:
            _say(f"host discovery: {describe(hosts)} (was {describe(self.hosts)})")
        self.hosts = hosts

    def _host(self, name):
        if name not in self._hosts_by_name:
            self._hosts_by_name[name] = LOCAL if is_local(name) else self.remote_host(name)
        return self._hosts_by_name[name]

    def _usable_hosts(self):
        """The hosts found, less the lost ones."""
        return [(h, s) for h, s in self.hosts if h not in self.lost_hosts]

    def _start_epoch(self, members):
        self._epoch_members = list(members)
        super()._start_epoch(members)

    def _role_hosts(self):
        """The driver's machine: on loopback while the epoch's members are all here, else
        at its address toward the first remote member's host."""
        remote = [self._host_of[w] for w in self._epoch_members if self._host_of[w].remote]
        if not remote:
            return LOCAL, [LOCAL] * self.num_servers
        name = remote[0].name
        if name not in self._driver_hosts:
            self._driver_hosts[name] = Host(self.address_toward(name), name="driver",
                                            tagged=True)
        here = self._driver_hosts[name]
        return here, [here] * self.num_servers

    def _first_workers(self, num_workers):
        """Waits for --min-np slots, then starts min(slots, --max-np) workers."""
        deadline = time.monotonic() + self.elastic_timeout
        said, first = False, True
        while True:
            try:
                self._take_hosts(self.discovery.find())
            except DiscoveryError as e:
                if first:  # a broken script or command line: say so at once
                    raise LaunchError(f"{e}; no worker started", 1) from None
                _say(f"{e}; trying again")
            first = False
            found = sum(s for _, s in self.hosts)
            if found >= self.min_np:
                return self._fill(announce=False)
            if time.monotonic() >= deadline:
                raise LaunchError(f"the host discovery script found {describe(self.hosts)} "
                                  f"in {self.elastic_timeout:g} s (--elastic-timeout), fewer "
                                  f"than the {self.min_np} worker(s) needed to start "
                                  f"(--min-np/-np); no worker started", 1)
            if not said:
                _say(f"waiting for {self.min_np} slot(s) (--min-np/-np): the host discovery "
                     f"script found {describe(self.hosts)}; waiting up to "
                     f"{self.elastic_timeout:g} s (--elastic-timeout)")
                said = True
            self._check_deadline()
            time.sleep(self.discovery.interval_s)

    def _live(self):
        return [w for w in self.members + self.joining
                if w not in self.finished and w not in self.removed]

    def _fill(self, announce=True):
        """Starts workers on slots no worker holds, up to --max-np; returns their ids."""
        live = self._live()
        hosts = self._usable_hosts()
        capacity = sum(s for _, s in hosts) - self._capacity_lost
        if self.max_np is not None:
            capacity = min(capacity, self.max_np)
        started = []
        for host, slots in hosts:
            used = sum(self._slot_host[w] == host for w in live)
            for _ in range(min(slots - used, capacity - len(live) - len(started))):
                worker_id = self._start_worker(self._host(host))
                self._slot_host[worker_id] = host
                started.append(worker_id)
        if started and announce:
            self.joining += started
            _say(f"started worker(s) {', '.join(started)} on new slot(s); they join at the "
                 "members' next commit")
        return started

    def _shrink(self):
        """Stops the workers of hosts that are gone or have fewer slots now."""
        slots = dict(self.hosts)
        live = self._live()
        # Joining ones go first (they hold nothing yet), then the highest ranks.
        order = [w for w in reversed(self.joining) if w in live] + \
                [w for w in reversed(self.members) if w in live]
        for host in {self._slot_host[w] for w in live}:
            on_host = [w for w in order if self._slot_host[w] == host]
            for worker_id in on_host[:max(0, len(on_host) - slots.get(host, 0))]:
                why = (f"has {slots[host]} slot(s) now" if host in slots
                       else "is gone from the discovery script's output")
                self.removed[worker_id] = f"was stopped by the driver: host {host} {why}"
                rank = (f" (rank {self.members.index(worker_id)})"
                        if worker_id in self.members else " (joining)")
                _say(f"stopping worker {worker_id}{rank}: host {host} {why}")
                self._worker(worker_id).signal_group(signal.SIGTERM)
                self._stopping[worker_id] = time.monotonic()

    def _watch_hosts(self):
        now = time.monotonic()
        for worker_id, since in list(self._stopping.items()):
            p = self._worker(worker_id)
            if p.poll() is not None:
                del self._stopping[worker_id]
            elif now - since > _STOP_GRACE_S:
                p.signal_group(signal.SIGKILL)
                del self._stopping[worker_id]
        if self._ending():
            return
        try:
            found = self.discovery.poll()
            if found is not None:
                self._take_hosts(found)
        except DiscoveryError as e:
            _say(f"{e}; the hosts stay as last found, trying again in "
                 f"{self.discovery.interval_s:g} s")
        self._shrink()
        self._fill()
        self._check_min_np(now)

    def _check_min_np(self, now):
        members = [m for m in self.members if m not in self.finished and m not in self.removed]
        if len(members) >= self.min_np:
            if self._below_since is not None:
                _say(f"{len(members)} worker(s) again, at least --min-np {self.min_np}")
            self._below_since = None
            return
        if self._below_since is None:
            self._below_since = now
            _say(f"{len(members)} worker(s), fewer than --min-np {self.min_np}: waiting up "
                 f"to {self.elastic_timeout:g} s (--elastic-timeout) for slots for more "
                 f"(the host discovery script found {describe(self.hosts)}); the workers "
                 "go on meanwhile")
        elif now - self._below_since >= self.elastic_timeout:
            raise LaunchError(f"{len(members)} worker(s) for {self.elastic_timeout:g} s "
                              f"(--elastic-timeout), fewer than --min-np {self.min_np}; the "
                              f"host discovery script found {describe(self.hosts)}; stopped "
                              "the others", 1)

    # --- losses -----------------------------------------------------------------------

    def _check_survivors(self, survivors, names, lost):
        if not survivors:
            raise LaunchError(f"{names}; no worker is left to hold the training state; "
                              "stopped the others", 1, self._worker(lost[0][0]))

    def _replace(self, lost):
        """A worker that died on its own: its slot is filled again (_fill) only while
        --elastic-restarts allows."""
        for worker_id in lost:
            if self.restarts_left > 0:
                self.restarts_left -= 1
                _say(f"worker {worker_id}'s slot gets a new worker "
                     f"({self.restarts_left} restart(s) left)")
            else:
                self._capacity_lost += 1
                _say(f"worker {worker_id}'s slot stays empty: no restart left "
                     f"(--elastic-restarts); the job now has at most "
                     f"{sum(s for _, s in self.hosts) - self._capacity_lost} worker(s)")

    def teardown(self, grace_s=0.0):
        self.discovery.stop()
        super().teardown(grace_s)

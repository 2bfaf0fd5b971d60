"""The elastic driver: a job that goes on when a worker dies, and takes in new workers.

`tfps-run --elastic` uses it (docs/elastic.md). The membership of a running job changes
by *epochs*. Each epoch is a complete rendezvous of its own: a fresh scheduler and fresh
servers for exactly that epoch's workers. The driver writes the current epoch to a file in
the job's directory (TFPS_ELASTIC_DIR), which every worker reads:

    epoch.json  {"epoch": E, "scheduler": "host:port", "num_servers": M,
                 "members": ["w0", "w1", ...]}          (a worker's rank: its place here)
    join-<id>   a new worker is ready to join (written by its init())
    ack-<E>-<id> worker <id> completed the rendezvous of epoch E

When a member dies (any non-zero exit), the driver at once starts the next epoch's
scheduler and servers for the survivors, in their old order (ranks are renumbered densely,
order kept), and publishes it. The survivors learn of the death from the old epoch's
scheduler (a member notice, in seconds), fail what is in flight, and re-initialise into the
new epoch (tf_ps_ops.elastic). A worker started later (a restart, `--elastic-restarts`)
announces itself with join-<id>; once every member of the current epoch has acknowledged
it, the driver publishes the next epoch with the newcomer appended, which the members see
at their next commit (elastic.State.commit -> check_host_updates). With a host discovery
script (elastic_growth.py), new slots get new workers that join the same way, and workers
the driver stops because their host is gone (`removed`) are a membership change, not a
failure.

The old epoch's scheduler and servers exit by themselves once the survivors said goodbye;
those still running _OLD_EPOCH_GRACE_S later are stopped. Their exit codes are no failure
of the job. A server (or the scheduler) of the current epoch that dies is an epoch change
too, with the same members: the driver starts the next epoch's scheduler and servers (as
many as before), up to `server_restarts` times; the workers restore their last commit and
their state sync fills the new servers (in PS mode: tf_ps_ops.elastic pushes the
parameters). Once the budget is spent, a dying role ends the job. Standard library only,
as the rest of the launcher.

On several hosts (`tfps-run --elastic -H`), the scheduler and servers of each epoch go
where the non-elastic launch puts them and the workers to their slots (a replacement to
the host of the worker it replaces), over ssh; a remote worker's epochs, joins and acks
travel in its ssh session (elastic_ssh.py), and its loss is its session's end
(its exit code, or ssh's 255 for a lost host). A host some session to which ended with
ssh's 255 is lost: later epochs put their scheduler and servers on the hosts left (in
turn), and a replacement worker goes to the first host left.
"""

import json
import os
import signal
import time

from tf_ps_ops.runner.elastic_ssh import SSH_FAILED, describe_remote_exit, send_epoch
from tf_ps_ops.runner.job import Job, LaunchError
from tf_ps_ops.runner.process import LOCAL
from tf_ps_ops.runner.status import with_port

EPOCH_FILE = "epoch.json"
_OLD_EPOCH_GRACE_S = 15.0
_POLL_S = 0.05


def write_epoch(directory, epoch, scheduler, num_servers, members, metrics=None):
    """Writes the epoch file atomically (rename), so that a reader sees it whole; returns
    what it wrote. `metrics`: {"scheduler": port, "servers": [port, ...]}, the epoch's
    metrics ports (tfps-run --metrics-port)."""
    path = os.path.join(directory, EPOCH_FILE)
    tmp = f"{path}.{epoch}.tmp"
    content = {"epoch": epoch, "scheduler": scheduler, "num_servers": num_servers,
               "members": list(members)}
    if metrics is not None:
        content["metrics"] = metrics
    with open(tmp, "w") as f:
        json.dump(content, f)
    os.replace(tmp, path)
    return content


def _heartbeat_timeout(env):
    """TFPS_HEARTBEAT_TIMEOUT of the job's environment, as the roles read it (default 30,
    at least 1); a value they would refuse gives the default here (they say why)."""
    try:
        value = float(env.get("TFPS_HEARTBEAT_TIMEOUT", "30"))
    except ValueError:
        return 30.0
    return max(value, 1.0) if value == value else 30.0


def _say(text):
    print(f"tfps-run: {text}", flush=True)


class ElasticJob:
    """Runs `command` as an elastic job of `num_workers` workers (see the module doc).

    `min_workers`: fewer survivors end the job. `restarts`: how many dead workers are
    replaced by a new process running the same command. `worker_env(base)` is the
    environment of a worker before the elastic variables are added."""

    def __init__(self, ps_server, num_servers, output, directory, command, env,
                 min_workers=1, restarts=0, timeout=None, server_threads=None, cwd=None,
                 server_restarts=0, worker_hosts=None, scheduler_host=LOCAL,
                 server_hosts=None, metrics_ports=None):
        """`worker_hosts`: the host of each first worker (default: all here);
        `scheduler_host`, `server_hosts`: where each epoch's roles run; `metrics_ports`:
        a status.ElasticPorts (tfps-run --metrics-port), or None."""
        self.ps_server, self.num_servers = ps_server, num_servers
        self.output, self.directory, self.command = output, directory, command
        self.env, self.cwd = dict(env), cwd
        self.min_workers, self.restarts_left = min_workers, restarts
        self.server_restarts, self.server_restarts_left = server_restarts, server_restarts
        self.timeout, self.server_threads = timeout, server_threads
        self.deadline = time.monotonic() + timeout if timeout else None
        self.workers = Job(None, 0, 0, output, cwd=cwd)  # every worker process, all epochs
        self.epochs = []  # [(epoch, Job of its scheduler and servers, retired_at or None)]
        self.epoch = -1
        self.members = []  # worker ids of the current epoch, in rank order
        self.joining = []  # ids started but not yet in an epoch
        self.finished = set()
        self._next_id = 0
        self._stopped_since = {}  # process -> when it was first seen stopped
        self._next_stop_check = 0.0
        self.hang_limit_s = 30.0  # run() reads it from the job's environment
        self.worker_hosts = worker_hosts
        self.scheduler_host = scheduler_host
        self.server_hosts = server_hosts or [LOCAL] * num_servers
        self._host_of = {}  # worker id -> its Host
        self.lost_hosts = set()  # names of remote hosts some ssh session to which failed
        self._published = None  # the current epoch, as written to epoch.json
        self.removed = {}  # worker id -> why the driver stopped it (no failure of the job)
        self.metrics_ports = metrics_ports
        self._port_set = {}  # epoch -> the set of metrics ports its roles hold (or None)

    # --- epochs -----------------------------------------------------------------------

    def _start_epoch(self, members):
        """Starts the next epoch's scheduler and servers for `members` and publishes it.
        The epoch before, if some member never completed its rendezvous (a member died
        in it), is abandoned: its scheduler is stopped once the new epoch is published,
        and refuses the registrants, who go to the new one instead of waiting
        TFPS_TIMEOUT (basics.init)."""
        abandoned = None
        if self.epochs and not self._acknowledged():
            abandoned = self.epochs[-1]
        epoch = self.epoch + 1
        roles = Job(self.ps_server, len(members), self.num_servers, self.output,
                    cwd=self.cwd)
        port_file = os.path.join(self.directory, f"port-{epoch}")
        scheduler_host, server_hosts = self._role_hosts()
        ports = self._control_ports(epoch)
        port = roles.start_scheduler(with_port(self.env, ports, "scheduler", 0), port_file,
                                     host=scheduler_host)
        for index in range(self.num_servers):
            roles.start_server(index, with_port(self.env, ports, "server", index),
                               host=server_hosts[index], threads=self.server_threads)
        now = time.monotonic()
        self.epochs = [(e, job, retired or now) for e, job, retired in self.epochs]
        self.epochs.append((epoch, roles, None))
        self.epoch, self.members = epoch, list(members)
        shown = ports and ports[("scheduler", 0)] and {
            "scheduler": ports[("scheduler", 0)],
            "servers": [ports[("server", i)] for i in range(self.num_servers)]}
        self._published = write_epoch(self.directory, epoch,
                                      f"{roles.scheduler_host}:{port}", self.num_servers,
                                      members, shown or None)
        for p in self.workers.processes:
            if p.host.remote:
                send_epoch(p, self._published)
        _say(f"elastic epoch {epoch}: {len(members)} worker(s) "
             f"[{', '.join(members)}] (ranks in this order), scheduler port {port}"
             + (f"; metrics ports: scheduler {shown['scheduler']}, servers "
                f"{', '.join(map(str, shown['servers']))}" if shown else ""))
        if abandoned is not None:
            old_epoch, old_roles, _ = abandoned
            _say(f"elastic epoch {old_epoch} is abandoned before its rendezvous completed; "
                 f"stopped its scheduler, its members go to epoch {epoch}")
            old_roles.process("scheduler", 0).signal_group(signal.SIGTERM)

    def _control_ports(self, epoch):
        """The metrics ports of epoch `epoch`'s scheduler and servers (None: no ports),
        from a set no epoch still running holds."""
        if self.metrics_ports is None:
            return None
        busy = {self._port_set.get(e) for e, roles, _ in self.epochs
                if any(p.poll() is None for p in roles.processes)}
        self._port_set[epoch], ports = self.metrics_ports.control(busy)
        return ports

    def metrics_targets(self):
        """[(rank, host, metrics port)] of the current members (tfps-run's status line;
        called from its thread: reads a snapshot)."""
        members, host_of = list(self.members), dict(self._host_of)
        return [(rank, "127.0.0.1" if host_of.get(w, LOCAL).local else host_of[w].name,
                 self.metrics_ports.port(w))
                for rank, w in enumerate(members) if self.metrics_ports.port(w)]

    def _usable(self, host):
        return host.name not in self.lost_hosts

    def _role_hosts(self):
        """Where this epoch's scheduler and servers go: where they were meant to, but
        for a lost host, whose place the hosts left take in turn."""
        planned = [self.scheduler_host, *self.server_hosts]
        left = []
        for host in planned + (self.worker_hosts or []):
            if self._usable(host) and host not in left:
                left.append(host)
        if not left:
            raise LaunchError(f"every host is lost ({', '.join(sorted(self.lost_hosts))}); "
                              "no place is left for the scheduler and servers", 1)
        spare = iter(left * len(planned))
        placed = [host if self._usable(host) else next(spare) for host in planned]
        return placed[0], placed[1:]

    def _note_lost_host(self, process, code):
        host = process.host
        if host.remote and code == SSH_FAILED and host.name not in self.lost_hosts:
            self.lost_hosts.add(host.name)
            _say(f"host {host.name} is lost (an ssh session to it failed: exit 255); "
                 f"no new role goes there")

    def _start_worker(self, host=LOCAL):
        worker_id = f"w{self._next_id}"
        self._next_id += 1
        env = dict(self.env)
        env.update({"TFPS_ELASTIC": "1", "TFPS_ELASTIC_DIR": self.directory,
                    "TFPS_ELASTIC_ID": worker_id, "PYTHONUNBUFFERED": "1"})
        if self.metrics_ports is not None:
            env["TFPS_METRICS_PORT"] = str(self.metrics_ports.take(
                worker_id, lambda w: self._worker(w).poll() is None))
        p = self.workers.spawn("worker", worker_id, self.command, env, host=host)
        self._host_of[worker_id] = host
        if host.remote and self._published is not None:
            send_epoch(p, self._published)
        return worker_id

    def _acknowledged(self):
        return all(os.path.exists(os.path.join(self.directory, f"ack-{self.epoch}-{m}"))
                   for m in self.members)

    # --- watching ---------------------------------------------------------------------

    def run(self, num_workers):
        """Returns 0 once every member of the last epoch exited 0; raises LaunchError."""
        self.hang_limit_s = _heartbeat_timeout(self.env)
        self._start_epoch(self._first_workers(num_workers))
        while True:
            self._check_deadline()
            self._kill_stopped_members()
            self._watch_workers()
            self._watch_roles()
            self._watch_hosts()
            self._admit_joiners()
            self._retire_old_epochs()
            if self.members and all(m in self.finished for m in self.members):
                for j in self.joining:  # nobody is left to take them in
                    _say(f"stopped joining worker {j}: the job finished before it joined")
                    self._worker(j).signal_group(signal.SIGTERM)
                return 0
            time.sleep(_POLL_S)

    def _first_workers(self, num_workers):
        """Starts the workers of the first epoch; returns their ids."""
        hosts = self.worker_hosts or [LOCAL] * num_workers
        return [self._start_worker(hosts[i]) for i in range(num_workers)]

    def _watch_hosts(self):
        """Each turn of the loop: the hosts are fixed here (elastic_growth.py grows)."""

    def _worker(self, worker_id):
        return self.workers.process("worker", worker_id)

    def _watch_workers(self):
        dead = []
        for worker_id in self.members + self.joining:
            p = self._worker(worker_id)
            code = p.poll()
            if code is None or worker_id in self.finished:
                continue
            if code == 0 and worker_id not in self.removed:
                self.finished.add(worker_id)
                continue
            self._note_lost_host(p, code)
            dead.append((worker_id, code))
        if not dead:
            return
        for worker_id, code in dead:
            self.finished.add(worker_id)  # it is over for this id either way
            if worker_id in self.joining:
                self.joining.remove(worker_id)
                if worker_id in self.removed:
                    continue
                _say(f"joining worker {worker_id} "
                     f"{describe_remote_exit(self._worker(worker_id), code)}")
        survivors = [m for m in self.members if m not in self.finished]
        lost = [(w, c) for w, c in dead if w in self.members]
        if not lost:
            return
        names = ", ".join(f"worker {w} (rank {self.members.index(w)}) "
                          + (self.removed[w] if w in self.removed else
                             describe_remote_exit(self._worker(w), c)) for w, c in lost)
        if self._ending():
            if all(w in self.removed for w, _ in lost):
                return  # stopped by the driver: nothing the others need any more
            raise LaunchError(f"{names} while the others were finishing", 1)
        self._check_survivors(survivors, names, lost)
        _say(f"{names}; the job goes on with {len(survivors)} worker(s)")
        self._start_epoch(survivors)
        self._replace([w for w, _ in lost if w not in self.removed])

    def _ending(self):
        """Some member already finished: the job is ending, not shrinking."""
        return any(self._worker(m).returncode == 0 and m not in self.removed
                   for m in self.members)

    def _check_survivors(self, survivors, names, lost):
        if len(survivors) < self.min_workers:
            raise LaunchError(f"{names}; {len(survivors)} left, fewer than "
                              f"--elastic-min-workers {self.min_workers}; stopped the others",
                              1, self._worker(lost[0][0]))

    def _replace(self, lost):
        """Starts a new worker for each of `lost` while --elastic-restarts allows."""
        for worker_id in lost:
            if self.restarts_left > 0:
                self.restarts_left -= 1
                host = self._host_of[worker_id]
                if not self._usable(host):
                    host = self._role_hosts()[0]
                new_id = self._start_worker(host)
                self.joining.append(new_id)
                _say(f"started worker {new_id} to take the place of a lost one "
                     f"({self.restarts_left} restart(s) left)")

    def _kill_stopped_members(self):
        """A member, server or scheduler of the current epoch stopped (SIGSTOP, Ctrl-Z, a
        debugger) for TFPS_HEARTBEAT_TIMEOUT, the time after which the others lose it by
        heartbeat anyway, is killed: its exit is then a loss as any (a new epoch; for a
        worker, a restart if any is left)."""
        now = time.monotonic()
        if now < self._next_stop_check:
            return
        self._next_stop_check = now + 0.25
        epoch, roles, _ = self.epochs[-1]
        candidates = {}  # process -> how the driver names it
        for p in self.workers.stopped_processes():
            if p.index in self.members and p.index not in self.finished:
                candidates[p] = f"worker {p.index} (rank {self.members.index(p.index)})"
        for p in roles.stopped_processes():
            candidates[p] = f"{p.name} of elastic epoch {epoch}"
        for p in list(self._stopped_since):
            if p not in candidates:
                del self._stopped_since[p]
        for p, name in candidates.items():
            since = self._stopped_since.setdefault(p, now)
            if now - since >= self.hang_limit_s:
                del self._stopped_since[p]
                _say(f"{name} has been stopped (SIGSTOP, Ctrl-Z or a debugger) for "
                     f"{now - since:.1f} s (TFPS_HEARTBEAT_TIMEOUT={self.hang_limit_s:g} s): "
                     "killed it, it is lost")
                p.signal_group(signal.SIGKILL)

    def _watch_roles(self):
        epoch, roles, _ = self.epochs[-1]
        for p in roles.processes:
            code = p.poll()
            if not code or all(m in self.finished for m in self.members):
                continue
            name = p.name if p.role == "scheduler" else f"server {p.index}"
            self._note_lost_host(p, code)
            if self.server_restarts_left <= 0 or any(m in self.finished for m in self.members):
                why = ("some workers have finished already" if self.server_restarts_left > 0
                       else f"no server restart left (--elastic-server-restarts "
                            f"{self.server_restarts} spent)")
                raise LaunchError(f"{name} of elastic epoch {epoch} "
                                  f"{describe_remote_exit(p, code)}; "
                                  f"{why}; stopped the others", 1, p)
            self.server_restarts_left -= 1
            _say(f"{name} of elastic epoch {epoch} {describe_remote_exit(p, code)}; "
                 f"the job goes on "
                 f"with new servers and the same {len(self.members)} worker(s), from their "
                 f"last commit ({self.server_restarts_left} server restart(s) left)")
            self._start_epoch(self.members)
            return

    def _admit_joiners(self):
        ready = [j for j in self.joining
                 if os.path.exists(os.path.join(self.directory, f"join-{j}"))]
        if not ready or not self._acknowledged():
            return
        for j in ready:
            self.joining.remove(j)
        _say(f"worker(s) {', '.join(ready)} join at the members' next commit")
        self._start_epoch(self.members + ready)

    def _retire_old_epochs(self):
        now = time.monotonic()
        kept = []
        for epoch, roles, retired in self.epochs:
            running = any(p.poll() is None for p in roles.processes)
            if retired is not None and (not running or now - retired > _OLD_EPOCH_GRACE_S):
                roles.teardown(0.5)
                continue
            kept.append((epoch, roles, retired))
        self.epochs = kept

    def _check_deadline(self):
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise LaunchError(f"timed out after {self.timeout:g} s; stopped all processes", 124)

    def teardown(self, grace_s=0.0):
        self.workers.teardown(grace_s)
        for _, roles, _ in self.epochs:
            roles.teardown(grace_s)
        self.epochs = []

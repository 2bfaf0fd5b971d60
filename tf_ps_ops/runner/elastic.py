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

import os
import signal
import time

from tf_ps_ops.runner.elastic_epochs import EPOCH_FILE, write_epoch  # noqa: F401
from tf_ps_ops.runner.elastic_epochs import ElasticEpochs, _say
from tf_ps_ops.runner.elastic_ssh import describe_remote_exit
from tf_ps_ops.runner.job import LaunchError
from tf_ps_ops.runner.process import LOCAL

_POLL_S = 0.05


def _heartbeat_timeout(env):
    """TFPS_HEARTBEAT_TIMEOUT of the job's environment, as the roles read it (default 30,
    at least 1); a value they would refuse gives the default here (they say why)."""
    try:
        value = float(env.get("TFPS_HEARTBEAT_TIMEOUT", "30"))
    except ValueError:
        return 30.0
    return max(value, 1.0) if value == value else 30.0


class ElasticJob(ElasticEpochs):
    """Runs `command` as an elastic job of `num_workers` workers (see the module doc).

    `min_workers`: fewer survivors end the job. `restarts`: how many dead workers are
    replaced by a new process running the same command. `worker_env(base)` is the
    environment of a worker before the elastic variables are added."""

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

    def _check_deadline(self):
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise LaunchError(f"timed out after {self.timeout:g} s; stopped all processes", 124)

    def teardown(self, grace_s=0.0):
        self.workers.teardown(grace_s)
        for _, roles, _ in self.epochs:
            roles.teardown(grace_s)
        self.epochs = []

"""The elastic driver's epochs (runner/elastic.py has the whole design): the job's state,
the epoch file every worker reads, and starting each epoch: its scheduler and servers on the
hosts not lost, published in epoch.json (and to remote workers over their ssh sessions),
its workers, and the old epochs' roles retired once their grace is over. ElasticJob
(runner/elastic.py) watches the processes and decides when an epoch changes. Standard
library only, as the rest of the launcher.
"""

import json
import os
import signal
import time

from tf_ps_ops.runner.elastic_ssh import SSH_FAILED, send_epoch
from tf_ps_ops.runner.job import Job, LaunchError
from tf_ps_ops.runner.process import LOCAL
from tf_ps_ops.runner.status import with_port

EPOCH_FILE = "epoch.json"
_OLD_EPOCH_GRACE_S = 15.0


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


def _say(text):
    print(f"tfps-run: {text}", flush=True)


class ElasticEpochs:
    """The state of an elastic job and its epochs; ElasticJob (runner/elastic.py) is the
    driver that runs them. The arguments are ElasticJob's."""

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

    def _worker(self, worker_id):
        return self.workers.process("worker", worker_id)

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

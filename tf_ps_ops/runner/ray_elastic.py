"""RayExecutor(min_workers=N, max_workers=M): an elastic job whose hosts are Ray's nodes.

horovod.ray's elastic mode, on tfps-run's elastic driver (elastic_growth.py): the hosts
are the cluster's alive nodes, each with as many slots as it has CPUs (GPUs) for
`cpus_per_worker` (`gpus_per_worker`), found about every second (RayNodes); a slot no
worker holds gets a worker actor pinned to its node, which runs the training function
from its start and joins at the members' next commit; a node that is gone loses its
workers, and the others go on from their last commit. With `max_workers` the executor
asks Ray's autoscaler for that many worker bundles (ray.autoscaler.sdk.request_resources),
so that a cluster which can grow adds the nodes. Fewer than `min_workers` wait up to
`elastic_timeout`. Each epoch's scheduler and servers run on the driver's node, as with
tfps-run.

A worker actor keeps the epochs in a folder of its own on its node: the driver sends each
epoch it publishes (set_epoch, a threaded actor, so while the training function runs),
and mirrors the join and ack files the worker makes there (marks) into its own job
directory, where the driver's loop looks for them. A worker's exit is its function's:
returned (0), raised (1: a loss, which spends a restart as a crashed process does), or
its actor killed (the driver stopped it, or its node died).
"""

import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from tf_ps_ops.runner.elastic import EPOCH_FILE
from tf_ps_ops.runner.elastic_growth import GrowingElasticJob
from tf_ps_ops.runner.keys import keep_key
from tf_ps_ops.runner.process import Host, Prefixed

_MARKS_EVERY_S = 0.2


@ray.remote(max_concurrency=4)
class _ElasticWorkerActor:
    """One elastic worker: the training function in one thread; epochs in, marks out."""

    def __init__(self, env, key):
        self._dir = tempfile.mkdtemp(prefix="tfps-ray-elastic-")
        self._lock = threading.Lock()
        self._epoch = -1
        os.environ.update({**env, **keep_key(self._dir, key), "TFPS_ELASTIC_DIR": self._dir})

    def set_epoch(self, epoch):
        """Writes `epoch` as epoch.json unless a newer one is there already (the calls of
        a threaded actor may run out of order)."""
        with self._lock:
            if epoch["epoch"] <= self._epoch:
                return
            path = os.path.join(self._dir, EPOCH_FILE)
            with open(f"{path}.tmp", "w") as f:
                json.dump(epoch, f)
            os.replace(f"{path}.tmp", path)
            self._epoch = epoch["epoch"]

    def marks(self):
        return [n for n in os.listdir(self._dir) if n.startswith(("join-", "ack-"))]

    def execute(self, fn, args, kwargs):
        return fn(*args, **kwargs)

    def cleanup(self):
        shutil.rmtree(self._dir, ignore_errors=True)


class RayNodes:
    """The alive nodes of the Ray cluster as hosts: [(name, slots)], HostDiscovery's
    interface (poll, find, stop) for the growing driver."""

    script = "Ray's alive nodes"

    def __init__(self, cpus_per_worker=1, gpus_per_worker=0, interval_s=1.0):
        self.cpus_per_worker, self.gpus_per_worker = cpus_per_worker, gpus_per_worker
        self.interval_s = interval_s
        self.nodes = {}  # name -> (node id, ip)
        self._next = 0.0

    def find(self):
        found = []
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            resources = node.get("Resources", {})
            slots = int(resources.get("CPU", 0) // self.cpus_per_worker) \
                if self.cpus_per_worker else 1 << 20
            if self.gpus_per_worker:
                slots = min(slots, int(resources.get("GPU", 0) // self.gpus_per_worker))
            name = f"{node['NodeManagerAddress']}/{node['NodeID'][:8]}"
            self.nodes[name] = (node["NodeID"], node["NodeManagerAddress"])
            if slots > 0:
                found.append((name, slots))
        self._next = time.monotonic() + self.interval_s
        return found

    def poll(self):
        return self.find() if time.monotonic() >= self._next else None

    def stop(self):
        pass


class _RayNode(Host):
    remote = False  # no ssh: the actor is placed on the node by Ray

    def __init__(self, name, node_id, ip):
        super().__init__(ip, name=name, tagged=True)
        self.node_id = node_id


class _RayWorker:
    """A worker actor seen as the driver sees a process: poll(), signal_group(), result."""

    role = "worker"
    pid = None

    def __init__(self, worker_id, host, env, key, call, options):
        self.index, self.host = worker_id, host
        self.name = f"{host.name}:worker {worker_id}"
        self.returncode = None
        self.result = self.error = None
        self.actor = _ElasticWorkerActor.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(host.node_id, soft=False),
            **options).remote(env, key)
        self.future = self.actor.execute.remote(*call)
        self._killed = False

    def send_epoch(self, epoch):
        self.actor.set_epoch.remote(epoch)

    def poll(self):
        if self.returncode is None and ray.wait([self.future], timeout=0)[0]:
            try:
                self.result = ray.get(self.future)
                self.returncode = 0
            except ray.exceptions.RayActorError as e:  # killed: by us, or its node died
                self.error = e
                self.returncode = -signal.SIGKILL
            except Exception as e:  # noqa: BLE001 - the training function raised
                self.error = e
                self.returncode = 1
                print(f"tfps-ray: worker {self.index} on {self.host.name} raised: "
                      f"{type(e).__name__}: {str(e)[:2000]}", file=sys.stderr, flush=True)
        return self.returncode

    def signal_group(self, sig):
        if not self._killed and self.poll() is None:
            self._killed = True
            ray.kill(self.actor, no_restart=True)


class _RayWorkers:
    """The Job-like container ElasticJob keeps its workers in."""

    def __init__(self):
        self.processes = []

    def process(self, role, index):
        for p in self.processes:
            if p.index == index:
                return p
        raise KeyError(f"no {role} {index} in this job")

    def stopped_processes(self):
        return []  # Ray's own health checks find a hung actor's node

    def teardown(self, grace_s=0.0):
        for p in self.processes:
            p.signal_group(signal.SIGKILL)
        give_up = time.monotonic() + max(grace_s, 5.0)
        while any(p.poll() is None for p in self.processes) and time.monotonic() < give_up:
            time.sleep(0.05)


class RayElasticJob(GrowingElasticJob):
    """GrowingElasticJob whose workers are actors on Ray's nodes (the module doc)."""

    def __init__(self, ps_server, num_servers, directory, env, worker_env, call, key,
                 min_workers, max_workers=None, elastic_timeout=600.0, restarts=0,
                 timeout=None, cpus_per_worker=1, gpus_per_worker=0):
        """`env`: the roles' environment (this process's); `worker_env`: what the
        workers' get added (the executor's `env`); `call`: (fn, args, kwargs)."""
        nodes = RayNodes(cpus_per_worker, gpus_per_worker)
        super().__init__(ps_server, num_servers, Prefixed(), directory, None, env,
                         restarts=restarts, timeout=timeout, discovery=nodes,
                         min_np=min_workers, max_np=max_workers,
                         elastic_timeout=elastic_timeout,
                         remote_host=lambda name: _RayNode(name, *nodes.nodes[name]))
        self.workers = _RayWorkers()
        self.call, self.key = call, key
        self.options = {"num_cpus": cpus_per_worker, "num_gpus": gpus_per_worker}
        here = ray.util.get_node_ip_address()
        self._here = Host(here, name=f"{here}/driver", tagged=True)
        self._next_marks = 0.0
        self._worker_env = {k: v for k, v in worker_env.items() if k != "TFPS_AUTH_KEY_FILE"}

    def _role_hosts(self):
        return self._here, [self._here] * self.num_servers

    def _start_worker(self, host=None):
        worker_id = f"w{self._next_id}"
        self._next_id += 1
        env = {**self._worker_env, "TFPS_ELASTIC": "1", "TFPS_ELASTIC_ID": worker_id,
               "PYTHONUNBUFFERED": "1"}
        p = _RayWorker(worker_id, host, env, self.key, self.call, self.options)
        self.workers.processes.append(p)
        self._host_of[worker_id] = host
        if self._published is not None:
            p.send_epoch(self._published)
        return worker_id

    def _start_epoch(self, members):
        super()._start_epoch(members)
        for p in self.workers.processes:
            if p.returncode is None:
                p.send_epoch(self._published)

    def _watch_hosts(self):
        self._relay_marks()
        super()._watch_hosts()

    def _relay_marks(self):
        """Copies the workers' join and ack files into the job directory."""
        now = time.monotonic()
        if now < self._next_marks:
            return
        self._next_marks = now + _MARKS_EVERY_S
        live = [p for p in self.workers.processes if p.poll() is None]
        futures = {p.actor.marks.remote(): p for p in live}
        ready, _ = ray.wait(list(futures), num_returns=len(futures), timeout=2.0)
        for future in ready:
            p = futures[future]
            try:
                names = ray.get(future)
            except ray.exceptions.RayError:
                continue  # its exit tells
            worker_id = re.escape(p.index)
            for name in names:
                path = os.path.join(self.directory, name)
                if re.fullmatch(rf"join-{worker_id}|ack-\d+-{worker_id}", name) and \
                        not os.path.exists(path):
                    open(path, "w").close()

    def results(self):
        """The results of the last epoch's members, in rank order."""
        return [self._worker(m).result for m in self.members]

    def teardown(self, grace_s=0.0):
        cleanups = [p.actor.cleanup.remote() for p in self.workers.processes
                    if p.poll() is None]
        if cleanups:
            ray.wait(cleanups, num_returns=len(cleanups), timeout=5.0)
        super().teardown(grace_s)

"""A tf_ps_ops job on a Ray cluster: the role horovod.ray's RayExecutor plays for Horovod.

    from tf_ps_ops.ray import RayExecutor

    def train(epochs):
        import tf_ps_ops as hvd
        hvd.init()                      # the executor set this worker's place
        ...
        return model.get_weights()

    ray.init(address="auto")
    executor = RayExecutor(num_workers=4)          # one server per Ray node by default
    executor.start()
    weights = executor.run(train, args=(3,))        # rank 0's result
    executor.shutdown()

The scheduler, servers and workers are Ray actors. Servers sit in a placement group of
one bundle per server with strategy STRICT_SPREAD (so one server per node when there are
as many servers as nodes, the default); the scheduler shares server 0's bundle; workers
sit in a second placement group (PACK by default: workers of a node share its server's
host). A server actor runs `ps_server` as a child process and stops it when the executor
shuts down. Needs `pip install ray` (requirements-ray.txt).

Elastic, as horovod.ray's: `RayExecutor(min_workers=2, max_workers=8)` runs the
training function (which uses `hvd.elastic.run`, docs/elastic.md) on as many workers as
the cluster's nodes have slots for, between the two; workers join as nodes come (Ray's
autoscaler is asked for `max_workers` bundles) and leave as nodes go (ray_elastic.py).
`run` then returns rank 0's result of the last membership, `run_all` every member's.

Every role listens on its node's interfaces, so the executor makes a key per job
(ZeroMQ CURVE, docs/security.md) and hands its text to each actor through Ray (never on a
command line); an actor keeps it in a private file (mode 600) that it removes at shutdown.
`env` with TFPS_AUTH_KEY_FILE (the same path on every node) or TFPS_INSECURE=1 opts out.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from tf_ps_ops.runner.env import Place, worker_env
from tf_ps_ops.runner.keys import keep_key
from tf_ps_ops.runner.process import describe_exit
from tf_ps_ops.runner.server_main import BINARY

_PORT_WAIT_S = 30.0


def _new_job_key(ps_server):
    """A fresh job key's text, made by `ps_server --gen-key` in a private folder."""
    folder = tempfile.mkdtemp(prefix="tfps-ray-key-")
    try:
        path = os.path.join(folder, "job.key")
        made = subprocess.run([ps_server, "--gen-key", path], capture_output=True, text=True,
                              timeout=30)
        if made.returncode != 0:
            raise RuntimeError(f"cannot make the job key with {ps_server} --gen-key: "
                               f"{made.stderr.strip() or made.stdout.strip()}")
        with open(path) as f:
            return f.read()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@ray.remote(num_cpus=0)
class _PsServerActor:
    """Runs one ps_server process (scheduler or server) on the node it is placed on."""

    def __init__(self, argv, env, key=None):
        self._dir = tempfile.mkdtemp(prefix="tfps-ray-")
        self._port_file = os.path.join(self._dir, "port")
        if "--port-file" in argv:
            argv[argv.index("--port-file") + 1] = self._port_file
        env = {**env, **keep_key(self._dir, key)}
        self._process = subprocess.Popen(argv, env={**os.environ, **env},
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def address(self):
        """(node ip, port) once a scheduler published its port."""
        give_up = time.monotonic() + _PORT_WAIT_S
        while not os.path.exists(self._port_file):
            if self._process.poll() is not None:
                raise RuntimeError(f"scheduler {describe_exit(self._process.returncode)} "
                                   "before publishing its port")
            if time.monotonic() > give_up:
                raise RuntimeError(f"scheduler published no port in {_PORT_WAIT_S:g} s")
            time.sleep(0.05)
        with open(self._port_file) as f:
            return ray.util.get_node_ip_address(), int(f.read())

    def node_ip(self):
        return ray.util.get_node_ip_address()

    def poll(self):
        return self._process.poll()

    def stop(self, grace_s=3.0):
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, 9)
                self._process.wait()
        shutil.rmtree(self._dir, ignore_errors=True)  # the key and the port file
        return self._process.returncode


@ray.remote
class _WorkerActor:
    """One training worker: its place goes into os.environ, where tf_ps_ops.init() reads it."""

    def set_env(self, env, key=None):
        self._dir = tempfile.mkdtemp(prefix="tfps-ray-")
        os.environ.update({**env, **keep_key(self._dir, key)})
        return ray.util.get_node_ip_address()

    def cleanup(self):
        shutil.rmtree(getattr(self, "_dir", ""), ignore_errors=True)

    def execute(self, fn, args, kwargs):
        return fn(*args, **kwargs)


class RayExecutor:
    def __init__(self, num_workers=None, num_servers=None, cpus_per_worker=1,
                 cpus_per_server=1, gpus_per_worker=0, env=None, ps_server=BINARY,
                 worker_strategy="PACK", min_workers=None, max_workers=None,
                 elastic_timeout=600, reset_limit=0):
        """`num_servers` defaults to the number of alive Ray nodes (one per node).
        `env` is added to every process's environment (e.g. TFPS_TIMEOUT).
        `min_workers` (instead of `num_workers`) makes the job elastic (the module doc):
        at most `max_workers` (default: as many as the nodes have slots for), waiting up
        to `elastic_timeout` s while fewer than `min_workers` are possible; `reset_limit`:
        how many workers that fail on their own (their function raised) are replaced.
        Its scheduler and servers (`num_servers`, default 1) run on the driver's node."""
        if (num_workers is None) == (min_workers is None):
            raise ValueError("give num_workers (a fixed job) or min_workers (an elastic "
                             "one), not both")
        if max_workers is not None and min_workers is None:
            raise ValueError("max_workers needs min_workers (an elastic job)")
        if max_workers is not None and max_workers < min_workers:
            raise ValueError(f"max_workers {max_workers} is less than min_workers "
                             f"{min_workers}")
        self.min_workers, self.max_workers = min_workers, max_workers
        self.elastic_timeout, self.reset_limit = elastic_timeout, reset_limit
        self._elastic_dir = self._key = None
        self._results = None
        self.num_workers = num_workers
        self.num_servers = num_servers
        self.cpus_per_worker, self.cpus_per_server = cpus_per_worker, cpus_per_server
        self.gpus_per_worker = gpus_per_worker
        self.env = {k: str(v) for k, v in (env or {}).items()}
        self.ps_server = ps_server
        self.worker_strategy = worker_strategy
        self._groups, self._servers, self._workers = [], [], []
        self._scheduler = None

    def _counts(self):
        return ["--num-workers", str(self.num_workers), "--num-servers", str(self.num_servers)]

    def _in(self, group, index):
        return PlacementGroupSchedulingStrategy(placement_group=group,
                                                placement_group_bundle_index=index)

    def start(self, timeout_s=120):
        """Places and starts scheduler, servers and workers; returns once the scheduler
        listens (workers join when the training function calls init()). Elastic: makes
        the job key and asks the autoscaler for the workers; run() starts the rest."""
        if self.min_workers is not None:
            return self._start_elastic()
        if self.num_servers is None:
            self.num_servers = sum(1 for node in ray.nodes() if node.get("Alive"))
        servers = placement_group([{"CPU": self.cpus_per_server}] * self.num_servers,
                                  strategy="STRICT_SPREAD")
        worker_bundle = {"CPU": self.cpus_per_worker}
        if self.gpus_per_worker:
            worker_bundle["GPU"] = self.gpus_per_worker
        workers = placement_group([worker_bundle] * self.num_workers,
                                  strategy=self.worker_strategy)
        self._groups = [servers, workers]
        ray.get([servers.ready(), workers.ready()], timeout=timeout_s)
        key = (None if "TFPS_AUTH_KEY_FILE" in self.env or self.env.get("TFPS_INSECURE") == "1"
               else _new_job_key(self.ps_server))
        self._scheduler = _PsServerActor.options(scheduling_strategy=self._in(servers, 0)).remote(
            [self.ps_server, "--role", "scheduler", "--port", "0", "--port-file", "-",
             *self._counts()], self.env, key)
        host, port = ray.get(self._scheduler.address.remote(), timeout=timeout_s)
        self._servers = [
            _PsServerActor.options(num_cpus=self.cpus_per_server,
                                   scheduling_strategy=self._in(servers, i)).remote(
                [self.ps_server, "--role", "server", "--scheduler", f"{host}:{port}",
                 *self._counts()], self.env, key)
            for i in range(self.num_servers)]
        self._workers = [
            _WorkerActor.options(num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker,
                                 scheduling_strategy=self._in(workers, rank)).remote()
            for rank in range(self.num_workers)]
        places = [Place(rank, self.num_workers, self.num_servers, host, port)
                  for rank in range(self.num_workers)]
        ray.get([w.set_env.remote(worker_env(place, self.env, ("tfps", "horovod")), key)
                 for w, place in zip(self._workers, places)], timeout=timeout_s)
        return self

    def run(self, fn, args=(), kwargs=None, timeout_s=None):
        """Runs fn(*args, **kwargs) on every worker; returns rank 0's result. Raises the
        first worker's error, or RuntimeError naming a server that exited first."""
        return self.run_all(fn, args, kwargs, timeout_s)[0]

    def _start_elastic(self):
        self.num_servers = self.num_servers or 1
        self._elastic_dir = tempfile.mkdtemp(prefix="tfps-ray-driver-")
        if "TFPS_AUTH_KEY_FILE" not in self.env and self.env.get("TFPS_INSECURE") != "1":
            self._key = _new_job_key(self.ps_server)
            keep_key(self._elastic_dir, self._key)
        if self.max_workers is not None:
            try:  # a cluster that can grow adds nodes for them; others ignore it
                from ray.autoscaler.sdk import request_resources
                bundle = {"CPU": self.cpus_per_worker}
                if self.gpus_per_worker:
                    bundle["GPU"] = self.gpus_per_worker
                request_resources(bundles=[bundle] * self.max_workers)
            except Exception as e:  # noqa: BLE001 - only a hint to the autoscaler
                print(f"tfps-ray: could not ask the autoscaler for {self.max_workers} "
                      f"workers: {e}", file=sys.stderr)
        return self

    def _run_elastic(self, fn, args, kwargs, timeout_s):
        from tf_ps_ops.runner.job import LaunchError
        from tf_ps_ops.runner.ray_elastic import RayElasticJob

        env = dict(self.env)
        if self._key is not None:
            env["TFPS_AUTH_KEY_FILE"] = os.path.join(self._elastic_dir, "job.key")
        job = RayElasticJob(self.ps_server, self.num_servers, self._elastic_dir,
                            {**os.environ, **env}, self.env,
                            (fn, tuple(args), dict(kwargs or {})),
                            self._key, self.min_workers, self.max_workers,
                            self.elastic_timeout, self.reset_limit, timeout_s,
                            self.cpus_per_worker, self.gpus_per_worker)
        try:
            job.run(self.min_workers)
            return job.results()
        except LaunchError as e:
            raise RuntimeError(f"elastic Ray job: {e}") from None
        finally:
            job.teardown(3.0)

    def run_all(self, fn, args=(), kwargs=None, timeout_s=None):
        """Like run, but returns every worker's result in rank order."""
        if self.min_workers is not None:
            return self._run_elastic(fn, args, kwargs, timeout_s)
        futures = [w.execute.remote(fn, tuple(args), dict(kwargs or {})) for w in self._workers]
        give_up = None if timeout_s is None else time.monotonic() + timeout_s
        pending = list(futures)
        while pending:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=1.0)
            for future in futures:
                if future not in pending:
                    ray.get(future)  # raises a worker's error at once
            if pending:
                self._check_servers()
                if give_up is not None and time.monotonic() > give_up:
                    raise TimeoutError(f"the workers ran over {timeout_s} s")
        return ray.get(futures)

    def _check_servers(self):
        codes = ray.get([a.poll.remote() for a in [self._scheduler, *self._servers]])
        for name, code in zip(["scheduler"] + [f"server {i}" for i in
                                               range(len(self._servers))], codes):
            if code not in (None, 0):
                raise RuntimeError(f"{name} {describe_exit(code)}")

    def shutdown(self):
        """Stops every process and actor and removes the placement groups."""
        if self._elastic_dir is not None:
            shutil.rmtree(self._elastic_dir, ignore_errors=True)
            self._elastic_dir = None
        actors = [a for a in [*self._servers, self._scheduler] if a is not None]
        if actors:
            ray.get([a.stop.remote() for a in actors], timeout=30)
        if self._workers:
            ray.get([w.cleanup.remote() for w in self._workers], timeout=30)
        for actor in actors + self._workers:
            ray.kill(actor)
        for group in self._groups:
            remove_placement_group(group)
        self._groups, self._servers, self._workers, self._scheduler = [], [], [], None

"""A job's layout from a cluster manager: Kubeflow's TF_CONFIG and Slurm, read through
TensorFlow's own cluster resolvers.

Both give a list of tasks per job name. tf_ps_ops reads them so:
- "ps" tasks run `ps_server --role server` (one server each), "chief" and "worker" tasks
  are workers: the chief is rank 0, worker task i is rank i + number of chiefs;
- the scheduler runs beside ps task 0 (its role helper starts it, see tf_ps_ops/runner/role.py),
  on ps task 0's host, at port TFPS_SCHEDULER_PORT or else the first port above ps task
  0's that no task on that host uses (Kubernetes, one task per pod: ps port + 1, i.e.
  2223 for TFJob's 2222). A TF_CONFIG cluster may instead name a "scheduler" job of one
  task: then the scheduler is there.
- under Slurm, with M = TFPS_NUM_SERVERS (default 1), the first M tasks of the step
  (SLURM_PROCID 0..M-1) are "ps", the rest "worker" (SlurmClusterResolver's ordering).

This module imports TensorFlow, so `_config` imports it only when the environment has no
TFPS_SCHEDULER/DMLC_PS_ROOT_URI and has TF_CONFIG or Slurm variables.
"""

import contextlib
import dataclasses
import os
from unittest import mock

WORKER_JOBS = ("chief", "worker")  # in rank order
IGNORED_JOBS = ("evaluator",)  # tasks outside training: never part of the job
DEFAULT_SLURM_PORT_BASE = 8888  # SlurmClusterResolver's default


@dataclasses.dataclass(frozen=True)
class Layout:
    """Who is where in a job; `role` and `index` are this process's task."""
    source: str  # the variable the layout came from, for error messages
    scheduler: tuple  # (host, port)
    servers: tuple  # ((host, port), ...), in ps task order
    workers: tuple  # ((host, port), ...), in rank order
    role: str  # "scheduler", "server", "worker" or "other" (evaluator)
    index: int  # rank of a worker, index of a server; 0 for the scheduler
    task: str  # how the cluster manager names this task, e.g. "worker 1"
    server_port_fixed: bool = True  # servers bind their task's port (else any port)

    @property
    def runs_scheduler(self):
        """True for the process that must start the scheduler too (ps task 0), or the
        scheduler task itself."""
        return self.role == "scheduler" or (self.role == "server" and self.index == 0
                                            and not self._has_scheduler_task)

    _has_scheduler_task: bool = False


def _split(source, address):
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{source}: task address {address!r} is not host:port")
    return host.strip("[]"), int(port)


@contextlib.contextmanager
def _os_environ(environ):
    """TF's resolvers read os.environ themselves: show them `environ` meanwhile."""
    if environ is os.environ:
        yield
    else:
        with mock.patch.dict(os.environ, environ, clear=True):
            yield


def scheduler_port(source, ps0, tasks, environ):
    """The scheduler's port: TFPS_SCHEDULER_PORT, else the first port above ps task 0's
    that no task on its host uses (every process computes the same from the same spec)."""
    raw = environ.get("TFPS_SCHEDULER_PORT", "").strip()
    if raw:
        if not raw.isdigit() or not 0 < int(raw) < 65536:
            raise ValueError(f"TFPS_SCHEDULER_PORT={raw!r} is not a port in 1..65535")
        port = int(raw)
    else:
        used = {p for h, p in tasks if h == ps0[0]}
        port = ps0[1] + 1
        while port in used:
            port += 1
        if port > 65535:
            raise ValueError(f"{source}: no free port above ps task 0's {ps0[1]}")
    if (ps0[0], port) in tasks:
        raise ValueError(f"TFPS_SCHEDULER_PORT={port}: {source} has a task at "
                         f"{ps0[0]}:{port} already")
    return port


def layout_from_spec(source, jobs, task_type, task_id, environ, server_port_fixed=True):
    """The Layout of a cluster spec {job: [address, ...]} for task (task_type, task_id)."""
    known = set(WORKER_JOBS) | set(IGNORED_JOBS) | {"ps", "scheduler"}
    unknown = sorted(set(jobs) - known)
    if unknown:
        raise ValueError(f"{source}: unknown job(s) {unknown}; tf_ps_ops knows "
                         f"{sorted(known)}")
    addresses = {job: [_split(source, a) for a in jobs.get(job, [])] for job in known}
    servers, sched = addresses["ps"], addresses["scheduler"]
    workers = addresses["chief"] + addresses["worker"]
    if not servers:
        raise ValueError(f"{source}: the cluster has no 'ps' task; tf_ps_ops needs at least "
                         "one parameter server")
    if not workers:
        raise ValueError(f"{source}: the cluster has no 'chief' or 'worker' task")
    if len(addresses["chief"]) > 1:
        raise ValueError(f"{source}: {len(addresses['chief'])} 'chief' tasks; at most one")
    if len(sched) > 1:
        raise ValueError(f"{source}: {len(sched)} 'scheduler' tasks; at most one")
    if task_type is None or task_type not in jobs:
        raise ValueError(f"{source}: this task's type {task_type!r} is not a job of the "
                         f"cluster {sorted(jobs)}")
    if task_id is None or not 0 <= int(task_id) < len(jobs[task_type]):
        raise ValueError(f"{source}: task index {task_id!r} is outside 0.."
                         f"{len(jobs[task_type]) - 1} of job {task_type!r}")
    task_id = int(task_id)
    every_task = [a for job in known for a in addresses[job]]
    scheduler = sched[0] if sched else (servers[0][0], scheduler_port(
        source, servers[0], every_task, environ))
    if task_type == "ps":
        role, index = "server", task_id
    elif task_type in WORKER_JOBS:
        role = "worker"
        index = task_id + (len(addresses["chief"]) if task_type == "worker" else 0)
    elif task_type == "scheduler":
        role, index = "scheduler", 0
    else:
        role, index = "other", task_id
    return Layout(source, scheduler, tuple(servers), tuple(workers), role, index,
                  f"{task_type} {task_id}", server_port_fixed, bool(sched))


def from_tf_config(environ):
    """The Layout TF_CONFIG describes, read by TF's TFConfigClusterResolver."""
    from tensorflow.python.distribute.cluster_resolver import tfconfig_cluster_resolver

    with _os_environ(environ):
        try:
            resolver = tfconfig_cluster_resolver.TFConfigClusterResolver()
            spec = resolver.cluster_spec().as_dict()
            task_type, task_id = resolver.task_type, resolver.task_id
        except ValueError as e:  # bad JSON
            raise ValueError(f"TF_CONFIG is not valid: {e}") from None
    # as_dict() gives a dict {index: address} for sparse jobs: keep them in index order.
    jobs = {job: (list(tasks) if isinstance(tasks, list)
                  else [tasks[i] for i in sorted(tasks)]) for job, tasks in spec.items()}
    return layout_from_spec("TF_CONFIG", jobs, task_type, task_id, environ)


def slurm_present(environ):
    return "SLURM_PROCID" in environ and "SLURM_STEP_NUM_TASKS" in environ


def from_slurm(environ, num_servers):
    """The Layout of this Slurm step, read by TF's SlurmClusterResolver: tasks
    0..num_servers-1 are ps tasks, the rest workers."""
    from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver

    for name in ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST",
                 "SLURM_STEP_TASKS_PER_NODE"):
        if not environ.get(name, "").strip():
            raise ValueError(f"{name} is not set: run the job's tasks with srun")
    num_tasks = _slurm_int(environ, "SLURM_STEP_NUM_TASKS")
    if num_tasks <= num_servers:
        raise ValueError(f"SLURM_STEP_NUM_TASKS={num_tasks} leaves no worker beside "
                         f"{num_servers} server task(s) (TFPS_NUM_SERVERS)")
    with _os_environ(environ):
        try:
            configuration = slurm_cluster_resolver.expand_tasks_per_node(
                environ["SLURM_STEP_TASKS_PER_NODE"])
            # One "GPU" per task: the resolver lists only as many tasks per node as it
            # has GPUs to give them; GPU placement is the job's business (local_rank).
            most = max(configuration)
            resolver = slurm_cluster_resolver.SlurmClusterResolver(
                jobs={"ps": num_servers, "worker": num_tasks - num_servers},
                port_base=DEFAULT_SLURM_PORT_BASE, gpus_per_node=most, gpus_per_task=1,
                auto_set_gpu=False)
            spec = resolver.cluster_spec().as_dict()
        except RuntimeError as e:
            raise ValueError(f"Slurm variables are inconsistent: {e}") from None
    return layout_from_spec("SLURM_PROCID", spec, resolver.task_type, resolver.task_id,
                            environ, server_port_fixed=False)


def _slurm_int(environ, name):
    raw = environ[name].strip()
    if not raw.isdigit():
        raise ValueError(f"{name}={raw!r} is not a non-negative integer")
    return int(raw)

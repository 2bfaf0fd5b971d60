"""The environment variables the Python layer reads, in one table.

Only what `init()` needs to call `tfps_init` lives here; the engine's own knobs
(`TFPS_PARTITION_BYTES`, `TFPS_TIMEOUT`, ...) are read by the C++ core from its own table.
`docs/env.md` is generated from or checked against `VARIABLES` (see `markdown_table`).

This module imports neither TensorFlow nor the op library, so the launcher and the
docs tooling can use it cheaply.
"""

import dataclasses
import os
import re


@dataclasses.dataclass(frozen=True)
class EnvVar:
    name: str
    type: str  # "int", "host", "host:port"
    default: object  # None: no default, the caller decides whether it is required
    doc: str
    fallbacks: tuple = ()  # read in order when `name` is unset (BytePS, Horovod)


VARIABLES = (
    EnvVar("TFPS_SCHEDULER", "host:port", None,
           "Address of the `ps_server --role scheduler` every worker registers with. "
           "Falls back to DMLC_PS_ROOT_URI + DMLC_PS_ROOT_PORT."),
    EnvVar("DMLC_PS_ROOT_URI", "host", None,
           "BytePS: scheduler host, used when TFPS_SCHEDULER is unset."),
    EnvVar("DMLC_PS_ROOT_PORT", "int", None,
           "BytePS: scheduler port, used when TFPS_SCHEDULER is unset."),
    EnvVar("TFPS_RANK", "int", None,
           "Rank of this worker, 0 <= rank < size.",
           ("DMLC_WORKER_ID", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")),
    EnvVar("TFPS_SIZE", "int", None,
           "Number of workers.",
           ("DMLC_NUM_WORKER", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")),
    EnvVar("TFPS_LOCAL_RANK", "int", None,
           "Overrides the local rank the scheduler derives from worker hosts.",
           ("HOROVOD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")),
    EnvVar("TFPS_LOCAL_SIZE", "int", None,
           "Overrides the local size the scheduler derives from worker hosts.",
           ("HOROVOD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")),
    EnvVar("TFPS_NUM_SERVERS", "int", 1,
           "Number of `ps_server --role server` processes in the cluster.",
           ("DMLC_NUM_SERVER",)),
    EnvVar("TF_CONFIG", "json", None,
           "Kubeflow TFJob / TensorFlow cluster spec, used when TFPS_SCHEDULER and "
           "DMLC_PS_ROOT_URI are unset: 'ps' tasks are servers (ps task 0 also runs the "
           "scheduler), 'chief' then 'worker' tasks are the workers in rank order. See "
           "docs/launch.md."),
    EnvVar("TFPS_SCHEDULER_PORT", "int", None,
           "Under TF_CONFIG or Slurm: the scheduler's port on ps task 0's host. Default: "
           "the first port above ps task 0's that no task on that host uses."),
    EnvVar("SLURM_PROCID", "int", None,
           "Slurm task rank, used (through SlurmClusterResolver, with SLURM_STEP_NUM_TASKS, "
           "SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE) when neither TFPS_SCHEDULER, "
           "DMLC_PS_ROOT_URI nor TF_CONFIG is set: tasks 0..TFPS_NUM_SERVERS-1 are servers, "
           "the rest workers."),
    EnvVar("TFPS_GRAPH_REWRITE", "int", 0,
           "1: `init()` turns on PS mode's graph rewrite (ResourceApplyXXX ops become "
           "PsApplyXXX: the servers run the optimizer). Same as "
           "`tf_ps_ops.enable_graph_rewrite()`. See docs/ps_mode.md."),
    EnvVar("TFPS_ELASTIC", "int", 0,
           "1: elastic membership (same as `init(elastic=True)`): a worker that dies or "
           "leaves does not end the job, and new workers may join at a commit. Needs the "
           "elastic driver (`tfps-run --elastic`), which sets the next two. See "
           "docs/elastic.md."),
    EnvVar("TFPS_ELASTIC_DIR", "str", None,
           "Set by `tfps-run --elastic`: the directory of the driver's epoch file."),
    EnvVar("TFPS_ELASTIC_ID", "str", None,
           "Set by `tfps-run --elastic`: this worker's stable id in the epoch file (its "
           "rank is its place among the epoch's members)."),
    EnvVar("TFPS_MODE", "str", None,
           "Default of `sfb.convert(model)`: `sfb` (every Dense layer by SFB; also when "
           "unset), `hybrid` (HybComm's cost model picks SFB or PS per Dense layer), "
           "`ps` or `sum` (no layer by SFB), `auto` (the planner decides from the cluster's "
           "measurements, docs/plan.md). See docs/sfb.md."),
    EnvVar("TFPS_PLAN", "str", None,
           "`auto`: `DistributedOptimizer` plans as with `plan=\"auto\"` (a codec per "
           "gradient, from TFPS_PLAN_CODECS, chosen from the cluster's measurements). "
           "Unset: no plan. See docs/plan.md."),
    EnvVar("TFPS_AUTOTUNE", "str", None,
           "`1`: `BroadcastGlobalVariablesCallback` also tunes this worker's fusion threshold, "
           "scheduling credit and cycle time while Keras trains (those the job did not set "
           "explicitly; tf_ps_ops.plan.autotune.AutoTune; Horovod's HOROVOD_AUTOTUNE). See "
           "docs/plan.md.", ("HOROVOD_AUTOTUNE",)),
    EnvVar("TFPS_AUTOTUNE_WARMUP_STEPS", "int", 10,
           "Steps the autotuner leaves untimed before its first sample."),
    EnvVar("TFPS_AUTOTUNE_STEPS_PER_SAMPLE", "int", 10,
           "Steps the autotuner times under each setting (the first after a change is "
           "not timed).", ("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE",)),
    EnvVar("TFPS_AUTOTUNE_LOG", "str", None,
           "A file rank 0's autotuner writes each sample to, as CSV (fusion_bytes, "
           "credit_bytes, cycle_us, median_step_s).", ("HOROVOD_AUTOTUNE_LOG",)),
    EnvVar("TFPS_PLAN_CODECS", "str", "none",
           "Comma-separated codecs the automatic plan may pick (none, fp16, bf16, int8, "
           "onebit). Default none only: a codec changes what training computes, so it is "
           "opt-in. See docs/plan.md."),
    EnvVar("TFPS_PLAN_MODES", "str", "sum,ps",
           "Comma-separated modes `DistributedOptimizer(plan=\"auto\")` may pick per gradient: "
           "sum (the workers' optimizer updates the averaged gradient) and ps (the servers "
           "run the optimizer, as tf_ps_ops.optimizers do; Keras 3 SGD, Adam, Adagrad and "
           "RMSprop only; their slots then live on the servers). See docs/plan.md."),
)

_BY_NAME = {var.name: var for var in VARIABLES}

_MAX_STALENESS = 1000000  # kMaxStaleness in cc/common/consistency.h


def check_consistency(text):
    """Returns `text` if it names a consistency model, else raises ValueError.

    bsp, asp or ssp:S with S a whole number from 0 to 1000000 (ssp:0 is bsp); the same
    rule as the C++ core's (cc/common/consistency.h), which a unit test holds them to.
    TFPS_CONSISTENCY itself is read by the core (init() fails on a bad value); this checks
    what `init(consistency=...)` and `tfps-run --consistency` are given.
    """
    match = re.fullmatch(r"ssp:([0-9]{1,7})", text) if isinstance(text, str) else None
    if text in ("bsp", "asp") or (match and int(match.group(1)) <= _MAX_STALENESS):
        return text
    raise ValueError(
        f"consistency {text!r} is not bsp, asp or ssp:S with S a whole number from 0 to "
        f"{_MAX_STALENESS} (the staleness bound, in steps); see docs/consistency.md")


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    scheduler_host: str
    scheduler_port: int
    rank: int
    size: int
    num_servers: int
    local_rank: object = None  # int, or None to use the scheduler's value
    local_size: object = None


def _parse_int(source, raw):
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError(f"{source}={raw!r} is not an integer") from None


def _parse_port(source, port):
    if not 0 < port < 65536:
        raise ValueError(f"{source}: port {port} is outside 1..65535")
    return port


def _parse_host_port(source, raw):
    host, sep, port = raw.strip().rpartition(":")
    host = host.strip("[]")  # "[::1]:7000"
    if not sep or not host:
        raise ValueError(f"{source}={raw!r} is not of the form host:port")
    return host, _parse_port(source, _parse_int(source, port))


_PARSERS = {
    "int": _parse_int,
    "host": lambda source, raw: raw.strip(),
    "str": lambda source, raw: raw.strip(),
    "host:port": _parse_host_port,
    "json": lambda source, raw: raw,  # parsed by TensorFlow's TFConfigClusterResolver
}

# Launchers of MPI programs set these; when one is read, the others that are set must agree.
_MPI_FAMILIES = (("OMPI_COMM_WORLD_RANK", "PMI_RANK"), ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"))


def lookup(name, environ=None):
    """Returns (value, source) for table entry `name`.

    `source` is the variable actually read (the entry or one of its fallbacks), so
    errors name what the user set; (default, None) when none is set.
    """
    environ = os.environ if environ is None else environ
    var = _BY_NAME[name]
    for source in (var.name, *var.fallbacks):
        raw = environ.get(source)
        if raw is not None and raw.strip():
            return _PARSERS[var.type](source, raw), source
    return var.default, None


def _require(name, environ):
    value, source = lookup(name, environ)
    if value is None:
        fallbacks = _BY_NAME[name].fallbacks
        alternatives = f" (or {', '.join(fallbacks)})" if fallbacks else ""
        raise ValueError(
            f"{name}{alternatives} is not set: start workers with `tfps-run`, "
            "or set the cluster environment yourself (see docs/env.md)")
    return value, source


def _scheduler(environ):
    address, _ = lookup("TFPS_SCHEDULER", environ)
    if address is not None:
        return address
    host, _ = lookup("DMLC_PS_ROOT_URI", environ)
    port, port_source = lookup("DMLC_PS_ROOT_PORT", environ)
    if host is None and port is None:
        raise ValueError(
            "TFPS_SCHEDULER is not set (nor DMLC_PS_ROOT_URI/DMLC_PS_ROOT_PORT, TF_CONFIG "
            "or Slurm's SLURM_PROCID): start workers with `tfps-run`, or set "
            "TFPS_SCHEDULER=host:port (see docs/launch.md)")
    if host is None or port is None:
        raise ValueError("DMLC_PS_ROOT_URI and DMLC_PS_ROOT_PORT must be set together")
    return host, _parse_port(port_source, port)


def cluster_source(environ=None):
    """What describes the cluster, first that applies: "tfps" (TFPS_SCHEDULER or
    DMLC_PS_ROOT_*: set by tfps-run, BytePS scripts or by hand), "tf_config", "slurm",
    or None."""
    environ = os.environ if environ is None else environ
    if any(environ.get(name, "").strip()
           for name in ("TFPS_SCHEDULER", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT")):
        return "tfps"
    if environ.get("TF_CONFIG", "").strip():
        return "tf_config"
    if "SLURM_PROCID" in environ and "SLURM_STEP_NUM_TASKS" in environ:
        return "slurm"
    return None


def read_layout(environ=None):
    """The whole job's layout (tf_ps_ops.common.resolvers.Layout) when a cluster manager
    describes it (TF_CONFIG or Slurm); None when TFPS_*/DMLC_* variables do. Imports
    TensorFlow in the first case."""
    environ = os.environ if environ is None else environ
    source = cluster_source(environ)
    if source not in ("tf_config", "slurm"):
        return None
    from tf_ps_ops.common import resolvers as _resolvers

    if source == "tf_config":
        return _resolvers.from_tf_config(environ)
    num_servers, servers_source = lookup("TFPS_NUM_SERVERS", environ)
    if num_servers < 1:
        raise ValueError(f"{servers_source}={num_servers}: need at least one server")
    layout = _resolvers.from_slurm(environ, num_servers)
    procid = _parse_int("SLURM_PROCID", environ["SLURM_PROCID"])
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        raw = environ.get(name, "").strip()
        if raw and _parse_int(name, raw) != procid:
            raise ValueError(
                f"{name}={raw} disagrees with SLURM_PROCID={procid}: an MPI launcher inside "
                "a Slurm allocation? Start the tasks with srun, or set TFPS_SCHEDULER, "
                "TFPS_RANK and TFPS_SIZE yourself")
    return layout


def _check_mpi_agreement(source, value, environ):
    """An MPI rank/size variable was read: the other MPI launcher's, if set, must agree."""
    for family in _MPI_FAMILIES:
        if source in family:
            for other in family:
                raw = environ.get(other, "").strip()
                if other != source and raw and _parse_int(other, raw) != value:
                    raise ValueError(f"{source}={value} and {other}={raw} disagree: which "
                                     "launcher started this process? Set TFPS_RANK/TFPS_SIZE")


def _from_layout(layout, environ):
    """(host, port, rank, size, num_servers) of a worker in `layout`; explicit TFPS_*
    variables may be set too, but must agree."""
    if layout.role != "worker":
        raise ValueError(
            f"{layout.source}: this process is {layout.task}, not a training worker; a ps "
            "task runs ps_server: start it with `python -m tf_ps_ops.role`")
    host, port = layout.scheduler
    values = {"TFPS_RANK": layout.index, "TFPS_SIZE": len(layout.workers),
              "TFPS_NUM_SERVERS": len(layout.servers)}
    for name, value in values.items():
        raw = environ.get(name, "").strip()
        if raw and _parse_int(name, raw) != value:
            raise ValueError(f"{name}={raw} disagrees with {layout.source}, which makes it "
                             f"{value} ({layout.task})")
    return host, port, values["TFPS_RANK"], values["TFPS_SIZE"], values["TFPS_NUM_SERVERS"]


def read_cluster(environ=None):
    """Reads and validates this worker's place in the cluster from the environment:
    TFPS_* (or BytePS's, Horovod's, Open MPI's, PMI's names), else TF_CONFIG, else Slurm."""
    environ = os.environ if environ is None else environ
    layout = read_layout(environ)
    if layout is not None:
        host, port, rank, size, num_servers = _from_layout(layout, environ)
        size_source = rank_source = servers_source = layout.source
    else:
        host, port = _scheduler(environ)
        size, size_source = _require("TFPS_SIZE", environ)
        rank, rank_source = _require("TFPS_RANK", environ)
        _check_mpi_agreement(size_source, size, environ)
        _check_mpi_agreement(rank_source, rank, environ)
        num_servers, servers_source = lookup("TFPS_NUM_SERVERS", environ)
    local_rank, local_rank_source = lookup("TFPS_LOCAL_RANK", environ)
    local_size, local_size_source = lookup("TFPS_LOCAL_SIZE", environ)
    if size < 1:
        raise ValueError(f"{size_source}={size}: need at least one worker")
    if not 0 <= rank < size:
        raise ValueError(f"{rank_source}={rank} is outside 0..{size - 1} ({size_source}={size})")
    if num_servers < 1:
        raise ValueError(f"{servers_source or 'TFPS_NUM_SERVERS'}={num_servers}: "
                         "need at least one server")
    if local_size is not None and not 1 <= local_size <= size:
        raise ValueError(f"{local_size_source}={local_size} is outside 1..{size}")
    if local_rank is not None:
        bound = size if local_size is None else local_size
        if not 0 <= local_rank < bound:
            raise ValueError(f"{local_rank_source}={local_rank} is outside 0..{bound - 1}")
    return ClusterConfig(host, port, rank, size, num_servers, local_rank, local_size)


# The engine's own variables the planner needs to know (tf_ps_ops/plan): read here as the
# C++ core reads them, with its defaults (tests/unit/test_plan_cost.py holds these to the
# core's table).
ENGINE_INTS = {"TFPS_PARTITION_BYTES": 1048576, "TFPS_FUSION_BYTES": 262144,
               "TFPS_SCHEDULING_CREDIT": 0, "TFPS_CYCLE_US": 0}


def engine_int(name, environ=None):
    """The value the engine runs with for one of ENGINE_INTS."""
    environ = os.environ if environ is None else environ
    raw = environ.get(name, "").strip()
    return _parse_int(name, raw) if raw else ENGINE_INTS[name]


def markdown_table():
    """The table as Markdown rows, for docs/env.md."""
    lines = ["| variable | type | default | meaning | also read |", "|---|---|---|---|---|"]
    for var in VARIABLES:
        default = "—" if var.default is None else f"`{var.default}`"
        fallbacks = ", ".join(f"`{name}`" for name in var.fallbacks) or "—"
        lines.append(f"| `{var.name}` | {var.type} | {default} | {var.doc} | {fallbacks} |")
    return "\n".join(lines) + "\n"

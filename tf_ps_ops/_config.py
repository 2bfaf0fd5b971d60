"""The environment variables the Python layer reads, in one table.

Only what `init()` needs to call `tfps_init` lives here; the engine's own knobs
(`TFPS_PARTITION_BYTES`, `TFPS_TIMEOUT`, ...) are read by the C++ core from its own table.
`docs/env.md` is generated from or checked against `VARIABLES` (see `markdown_table`).

This module imports neither TensorFlow nor the op library, so the launcher and the
docs tooling can use it cheaply.
"""

import dataclasses
import os


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
           ("DMLC_WORKER_ID", "HOROVOD_RANK")),
    EnvVar("TFPS_SIZE", "int", None,
           "Number of workers.",
           ("DMLC_NUM_WORKER", "HOROVOD_SIZE")),
    EnvVar("TFPS_LOCAL_RANK", "int", None,
           "Overrides the local rank the scheduler derives from worker hosts.",
           ("HOROVOD_LOCAL_RANK",)),
    EnvVar("TFPS_LOCAL_SIZE", "int", None,
           "Overrides the local size the scheduler derives from worker hosts.",
           ("HOROVOD_LOCAL_SIZE",)),
    EnvVar("TFPS_NUM_SERVERS", "int", 1,
           "Number of `ps_server --role server` processes in the cluster.",
           ("DMLC_NUM_SERVER",)),
    EnvVar("TFPS_GRAPH_REWRITE", "int", 0,
           "1: `init()` turns on PS mode's graph rewrite (ResourceApplyXXX ops become "
           "PsApplyXXX: the servers run the optimizer). Same as "
           "`tf_ps_ops.enable_graph_rewrite()`. See docs/ps_mode.md."),
    EnvVar("TFPS_MODE", "str", None,
           "Default of `sfb.convert(model)`: `sfb` (every Dense layer by SFB; also when "
           "unset), `hybrid` (HybComm's cost model picks SFB or PS per Dense layer), "
           "`ps` or `sum` (no layer by SFB). See docs/sfb.md."),
)

_BY_NAME = {var.name: var for var in VARIABLES}


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
}


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
            "TFPS_SCHEDULER is not set (nor DMLC_PS_ROOT_URI/DMLC_PS_ROOT_PORT): start "
            "workers with `tfps-run`, or set TFPS_SCHEDULER=host:port")
    if host is None or port is None:
        raise ValueError("DMLC_PS_ROOT_URI and DMLC_PS_ROOT_PORT must be set together")
    return host, _parse_port(port_source, port)


def read_cluster(environ=None):
    """Reads and validates this worker's place in the cluster from the environment."""
    environ = os.environ if environ is None else environ
    host, port = _scheduler(environ)
    size, size_source = _require("TFPS_SIZE", environ)
    rank, rank_source = _require("TFPS_RANK", environ)
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


def markdown_table():
    """The table as Markdown rows, for docs/env.md."""
    lines = ["| variable | type | default | meaning | also read |", "|---|---|---|---|---|"]
    for var in VARIABLES:
        default = "—" if var.default is None else f"`{var.default}`"
        fallbacks = ", ".join(f"`{name}`" for name in var.fallbacks) or "—"
        lines.append(f"| `{var.name}` | {var.type} | {default} | {var.doc} | {fallbacks} |")
    return "\n".join(lines) + "\n"

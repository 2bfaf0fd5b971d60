"""Where a worker learns its place: one table of the variables every launcher sets.

A worker reads its place through `tf_ps_ops.common.config` (TFPS_* first, then the BytePS and
Horovod names as fallbacks); scripts written for Horovod, BytePS or Open MPI read their
own names. Which dialects a worker gets is the launcher's choice: tfps-run sets them all,
the test fixture sets exactly one so that each reading path is tested on its own.
"""

import dataclasses

LOCAL_ADDRESS = "127.0.0.1"

# Inherited variables with these prefixes would override what a launcher sets; the test
# and benchmark clusters drop them so that a developer's shell cannot change a run.
CLUSTER_PREFIXES = ("TFPS_", "DMLC_", "HOROVOD_")


@dataclasses.dataclass(frozen=True)
class Place:
    """One worker's place in the job."""
    rank: int
    size: int
    num_servers: int
    scheduler_host: str
    scheduler_port: int
    local_rank: int = 0
    local_size: int = 1

    @property
    def scheduler(self):
        return f"{self.scheduler_host}:{self.scheduler_port}"

    @property
    def role(self):
        return "worker"  # the only role that reads this table: servers take flags


# (variable, dialect, the Place field it carries).
WORKER_VARIABLES = (
    ("TFPS_SCHEDULER", "tfps", "scheduler"),
    ("TFPS_RANK", "tfps", "rank"),
    ("TFPS_SIZE", "tfps", "size"),
    ("TFPS_NUM_SERVERS", "tfps", "num_servers"),
    # Overrides of what the scheduler derives from the workers' hosts: set them only
    # when the launcher knows the layout better than the scheduler does.
    ("TFPS_LOCAL_RANK", "tfps_local", "local_rank"),
    ("TFPS_LOCAL_SIZE", "tfps_local", "local_size"),
    ("DMLC_ROLE", "dmlc", "role"),
    ("DMLC_WORKER_ID", "dmlc", "rank"),
    ("DMLC_NUM_WORKER", "dmlc", "size"),
    ("DMLC_NUM_SERVER", "dmlc", "num_servers"),
    ("DMLC_PS_ROOT_URI", "dmlc", "scheduler_host"),
    ("DMLC_PS_ROOT_PORT", "dmlc", "scheduler_port"),
    ("HOROVOD_RANK", "horovod", "rank"),
    ("HOROVOD_SIZE", "horovod", "size"),
    ("HOROVOD_LOCAL_RANK", "horovod", "local_rank"),
    ("HOROVOD_LOCAL_SIZE", "horovod", "local_size"),
    ("OMPI_COMM_WORLD_RANK", "ompi", "rank"),
    ("OMPI_COMM_WORLD_SIZE", "ompi", "size"),
    ("OMPI_COMM_WORLD_LOCAL_RANK", "ompi", "local_rank"),
    ("OMPI_COMM_WORLD_LOCAL_SIZE", "ompi", "local_size"),
)
DIALECTS = ("tfps", "tfps_local", "dmlc", "horovod", "ompi")


def place_variables(place, dialects=DIALECTS):
    """{variable: text} telling a worker its `place` in the given dialects."""
    unknown = set(dialects) - set(DIALECTS)
    if unknown:
        raise ValueError(f"unknown dialects {sorted(unknown)}; known: {DIALECTS}")
    return {name: str(getattr(place, field))
            for name, dialect, field in WORKER_VARIABLES if dialect in dialects}


def worker_env(place, base, dialects=DIALECTS):
    """`base` (a mapping) plus the variables of `place`, which win; all values text."""
    env = {key: str(value) for key, value in base.items()}
    env.update(place_variables(place, dialects))
    return env


def without_cluster_variables(environ):
    """`environ` less every inherited TFPS_*, DMLC_* and HOROVOD_* variable."""
    return {k: v for k, v in environ.items() if not k.startswith(CLUSTER_PREFIXES)}

"""Access to the built native artifacts from tests, without importing TensorFlow.

`tf_ps_ops/__init__.py` imports TensorFlow (seconds per process); tests of the core and
the server load the pybind11 modules straight from their files instead: the core's
(_core) and the server's test binding (ps_server/testing, never packaged).
"""

import glob
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PS_SERVER = os.path.join(ROOT, "tf_ps_ops", "bin", "ps_server")


def _load(name, pattern):
    paths = glob.glob(os.path.join(ROOT, pattern))
    if not paths:
        raise RuntimeError(f"{pattern} is not built: run `make build`")
    spec = importlib.util.spec_from_file_location(name, paths[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_core():
    """The core's binding (wire, cluster messages, partitioning, config, the engine)."""
    return _load("_core", os.path.join("tf_ps_ops", "_core*.so"))


def load_server_testing():
    """The server's test binding (summation, checkpoints, the shard rule, a KeyStore)."""
    return _load("_ps_server_testing",
                 os.path.join("ps_server", "testing", "_ps_server_testing*.so"))


def init_from_env(core):
    """Starts `core`'s engine from the variables a cluster gives its workers
    (TFPS_SCHEDULER=host:port, TFPS_RANK, TFPS_SIZE, TFPS_NUM_SERVERS); returns (rank, size)."""
    host, port = os.environ["TFPS_SCHEDULER"].rsplit(":", 1)
    rank, size = int(os.environ["TFPS_RANK"]), int(os.environ["TFPS_SIZE"])
    core.init(host, int(port), rank, size, int(os.environ["TFPS_NUM_SERVERS"]))
    return rank, size

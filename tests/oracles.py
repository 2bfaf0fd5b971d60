"""Training tests in two halves: a cluster trains, every worker saving what it trained to
$TFPS_TEST_OUT/rank<r>.npz; then the test imports the same worker script as a module and
trains the single-process oracle with the same code (test_training.py, test_sfb.py).

    saved, results = train_on_cluster(tmp_path_factory, script, 3, 2, timeout=200)
    worker = worker_module(script)   # imports TensorFlow: in a test, never at collection
"""

import importlib
import importlib.util
import re
import sys
from pathlib import Path

import numpy as np

from cluster import Cluster, require_build

sys.path.insert(0, str(Path(__file__).resolve().parent / "multiprocess" / "workers"))
import harness  # noqa: E402


def train_on_cluster(tmp_path_factory, script, num_workers, num_servers, timeout, env=None,
                     servers_never_log=()):
    """Runs `script` on every worker of a new cluster, checks that every process exited 0
    and passed every check (and that no server's log has any of `servers_never_log`), and
    returns (what each worker saved: a list by rank of {name: array}, the workers'
    results)."""
    require_build()
    workdir = tmp_path_factory.mktemp(Path(script).stem)
    out = workdir / "out"
    out.mkdir()
    cluster = Cluster(workdir, num_workers, num_servers, timeout=timeout,
                      env={"TFPS_TEST_OUT": str(out), **(env or {})})
    try:
        harness.run_and_check(cluster, script)
        results = cluster.worker_results()
        for index in range(num_servers):
            server = cluster.result("server", index)
            for text in servers_never_log:
                assert text not in server.stderr, server.describe()
    finally:
        cluster.close()
    return [dict(np.load(out / f"rank{rank}.npz")) for rank in range(num_workers)], results


def worker_module(script):
    """The worker `script` imported into this process, to train the oracle: loaded from
    its own path, under a name of its own, so that a module of the same name imported
    earlier in this process (benchmarks/train_worker.py, for one) cannot stand in for it.
    Its folder goes on sys.path for the modules it imports beside it."""
    try:
        harness.pin_threads()
    except RuntimeError:
        pass  # TF already runs in this process (an earlier test): keep its thread pools
    path = Path(script).resolve()
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    name = "tfps_test_worker" + re.sub(r"\W", "_", str(path.with_suffix("")))
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return module


def saved_weights(saved, prefix):
    """The weights a worker saved as `prefix`.0, `prefix`.1, ... in order."""
    return [saved[f"{prefix}.{i}"]
            for i in range(sum(k.startswith(prefix + ".") for k in saved))]

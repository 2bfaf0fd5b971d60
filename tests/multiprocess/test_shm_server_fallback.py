"""TFPS_SHM_SERVER (on by default) where shared memory with the colocated server cannot be
used: the worker must notice and take the socket, with correct sums and no error.

- A worker in its own /dev/shm (a container with host networking shares the server's
  address, not its /dev/shm): the server's probe segment is not there, so the worker logs
  why once and pushes over the socket.
- A /dev/shm too small for the tensor, shared by the workers and the server: the
  partitions whose segments fit go through shared memory, the others over the socket,
  logged once per server.
Workers use the C++ core without TensorFlow (core_workers/hier_worker.py checks every
answer against NumPy).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
WORKER = HERE / "core_workers" / "hier_worker.py"
ENV = {"TFPS_HIERARCHICAL": "0", "TFPS_TIMEOUT": "60"}  # 512 KB partitions: not fused
NOT_SHARED = "is not in this process's /dev/shm"
SMALL_SHM = "over the socket: "

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a /dev/shm needs root")


def shm_segments():
    return sorted(p for p in os.listdir("/dev/shm") if p.startswith("tfps-"))


def test_a_worker_without_the_servers_dev_shm_takes_the_socket(make_cluster):
    before = shm_segments()
    cluster = make_cluster(2, 2, timeout=120, env=ENV)  # TFPS_SHM_SERVER: the default
    shell = "mount -t tmpfs -o size=64m,mode=1777 tmpfs /dev/shm && exec \"$@\""
    cluster.start(["unshare", "--mount", "--propagation", "private", "sh", "-c", shell, "sh",
                   sys.executable, WORKER, "2"])
    cluster.wait()
    cluster.assert_ok()  # hier_worker exits 4 on a wrong sum, 3 on an error
    for rank in (0, 1):
        stderr = cluster.result("worker", rank).stderr
        assert stderr.count(NOT_SHARED) == 2, stderr  # once per server
        assert "TFPS_SHM_SERVER" in stderr and "takes the socket" in stderr, stderr
    assert shm_segments() == before  # the servers unlinked the probes no one opened


# Runs a whole cluster (1 server, 2 workers) in this mount namespace; prints each
# process's stderr and exits 1 when one failed.
DRIVER = r"""
import os, sys
sys.path[:0] = [sys.argv[1], os.path.dirname(sys.argv[1])]  # tests/ and the repository
from cluster import Cluster
cluster = Cluster(sys.argv[2], 2, 1, timeout=120, env=eval(sys.argv[3]))
try:
    cluster.start([sys.executable, sys.argv[4], "2"])
    cluster.wait()
    for rank in (0, 1):
        print("=== worker", rank, cluster.result("worker", rank).stderr, flush=True)
    failed = cluster.failures()
    for result in failed:
        print(result.describe(), flush=True)
    sys.exit(1 if failed else 0)
finally:
    cluster.close()
"""


def test_a_dev_shm_smaller_than_the_tensor_sends_the_rest_over_the_socket(tmp_path):
    # 1 MB of /dev/shm for everyone: one of the 10 MB tensor's 512 KB partitions fits.
    shell = ("mount -t tmpfs -o size=1m,mode=1777 tmpfs /dev/shm && exec \"$@\"")
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", shell, "sh",
         sys.executable, "-c", DRIVER, str(HERE.parent), str(tmp_path / "cluster"), repr(ENV),
         str(WORKER)], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    for rank in (0, 1):
        part = result.stdout.split(f"=== worker {rank}")[1].split("=== worker")[0]
        assert NOT_SHARED not in part, part  # the probe passed: they share /dev/shm
        assert part.count(SMALL_SHM) == 1, part  # once per server
        assert "cannot reserve" in part and "/dev/shm" in part, part

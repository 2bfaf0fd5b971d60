"""TFPS_SHM_SERVER (on by default) where shared memory with the colocated server cannot be
used: the worker must notice and take the socket, with correct sums and no error.

- A worker in its own /dev/shm (a container with host networking shares the server's
  address, not its /dev/shm): the server's probe segment is not there, so the worker logs
  why once and pushes over the socket.
- Segments that cannot be reserved (memory limit; here ulimit -f, smaller than one
  partition): the partitions go over the socket, logged once per server.
- A segment still in use: several calls of one tensor in flight at once; while a
  partition's segment waits for its answer, the later calls' pushes of it take the socket.
- A server that refuses the segments mid-job (the workers' memfds cannot be reached
  through /proc/<pid>/fd: here each worker runs in its own PID namespace): the refused
  push (kFlagShmRefused, nothing counted) goes again over the socket, exact sums.
Workers use the C++ core without TensorFlow (core_workers/hier_worker.py checks every
answer against NumPy).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from shm_names import leftovers, shm_segments

HERE = Path(__file__).parent
WORKER = HERE / "core_workers" / "hier_worker.py"
ENV = {"TFPS_HIERARCHICAL": "0", "TFPS_TIMEOUT": "60",
       "TFPS_PARTITION_BYTES": "524288"}  # 512 KB partitions: not fused
NOT_SHARED = "is not in this process's /dev/shm"
SMALL_SHM = "over the socket: "

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a /dev/shm needs root")




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
    assert not leftovers(before)  # the servers unlinked the probes no one opened


# Runs a whole cluster (1 server, 2 workers) under this process's limits; prints each
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


def test_segments_that_cannot_be_reserved_send_the_partitions_over_the_socket(tmp_path):
    # Segments are memfds (no /dev/shm space): ulimit -f 256 KB keeps every 512 KB
    # partition's segment from being reserved (Python ignores SIGXFSZ: ftruncate fails).
    result = subprocess.run(
        ["prlimit", "--fsize=262144", sys.executable, "-c", DRIVER, str(HERE.parent),
         str(tmp_path / "cluster"), repr(ENV), str(WORKER)],
        capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    for rank in (0, 1):
        part = result.stdout.split(f"=== worker {rank}")[1].split("=== worker")[0]
        assert NOT_SHARED not in part, part  # the probe passed
        assert part.count(SMALL_SHM) == 1, part  # once per server
        assert "cannot reserve" in part and "ulimit -f" in part, part


def test_a_server_that_refuses_the_segments_gets_the_partitions_over_the_socket(make_cluster):
    # Each worker in its own PID namespace, /proc left as it is: the worker opens the
    # server's probe, but the server finds no worker memory at /proc/<its pid>/fd/<fd> (the
    # pid is the namespace's). Each refused push goes again over the socket, the next
    # ones go there at once; the sums are exact.
    before = shm_segments()
    cluster = make_cluster(2, 2, timeout=120, env=ENV)
    cluster.start(["unshare", "--pid", "--fork", sys.executable, WORKER, "3", "--exact"])
    cluster.wait()
    cluster.assert_ok()  # hier_worker exits 4 on a wrong sum, 3 on an error
    for rank in (0, 1):
        stderr = cluster.result("worker", rank).stderr
        assert NOT_SHARED not in stderr, stderr  # the probe passed: shm was on
        assert stderr.count(SMALL_SHM) == 2, stderr  # once per server
        assert "refused the shared memory of worker" in stderr, stderr
        assert "/proc/1/fd/" in stderr, stderr
    assert not leftovers(before)


def test_a_segment_still_in_use_sends_the_next_calls_over_the_socket(make_cluster):
    # Three calls of one 4 MB tensor started together, 4 times: steps 1-3 of each partition
    # are in flight at once, so its segment is busy (step 1's answer is not back) when
    # steps 2 and 3 are sent. The sums must be exact, and both paths must have been taken.
    before = shm_segments()
    cluster = make_cluster(2, 2, timeout=120, env={**ENV, "TFPS_SHM_SERVER": "1"})
    cluster.start([sys.executable, HERE / "core_workers" / "shm_busy_worker.py", "4", "3"])
    cluster.wait()
    cluster.assert_ok()  # exits 4 on a wrong sum, 3 on an error
    for rank in (0, 1):
        out = cluster.result("worker", rank).stdout
        stats = json.loads(out.split("stats ", 1)[1])
        assert 0 < stats["shm_parts_sent"] < stats["parts_sent"], stats
    assert not leftovers(before)

"""TFPS_IO_THREADS: a job with one or two ZeroMQ I/O threads per worker and server, plain
and with the job key, gives sums equal to NumPy's bit for bit; each worker and server runs
that many I/O threads; a server listens on one port per I/O thread, announces them all, and
worker r connects to port r mod their number (so each port, and its I/O thread, gets
workers); a bad value is refused naming the variable."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cluster import PS_SERVER, require_build
from hostile import served_ports
from test_auth import keyed_env, make_key

sys.path.insert(0, str(Path(__file__).parent / "core_workers"))
from io_threads_worker import io_thread_count  # noqa: E402

pytestmark = pytest.mark.timeout(120)
WORKER = Path(__file__).parent / "core_workers" / "io_threads_worker.py"


def accepted_connections(port):
    """How many established TCP connections on this host have local port `port`: the ones
    a server accepted on that listening port (the workers' ends have other local ports)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in list(f)[1:]:
                fields = line.split()
                if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    count += 1
    return count


def check_ports(cluster, io_threads, num_workers):
    """Each server listens on `io_threads` ports, the scheduler announced them all, and
    each port holds exactly the workers whose rank mod `io_threads` is its index."""
    scheduler = cluster.result("scheduler", 0).stderr
    for index in range(2):
        log = cluster.wait_for_output("server", index, "serving on port").stderr
        ports = served_ports(log)
        assert len(ports) == io_threads, log
        # Server ids follow the registration order, not the order the servers started in.
        registered = r"server \d registered from 127\.0\.0\.1:" + ",".join(map(str, ports))
        assert re.search(registered + "\n", scheduler), scheduler
        for i, port in enumerate(ports):
            expected = len([r for r in range(num_workers) if r % io_threads == i])
            assert accepted_connections(port) == expected, (index, ports, i)


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed"])
@pytest.mark.parametrize("io_threads", [1, 2])
def test_sums_are_exact_with_io_threads(make_cluster, tmp_path, io_threads, keyed):
    env = {"TFPS_IO_THREADS": str(io_threads), "TFPS_SHM_SERVER": "0",
           "TFPS_PARTITION_BYTES": str(1 << 20), "OMP_NUM_THREADS": "1"}
    if keyed:
        env.update(keyed_env(make_key(tmp_path)))
    done = tmp_path / "counted"
    cluster = make_cluster(2, 2, timeout=90, env=env)
    cluster.start([sys.executable, WORKER, done])
    try:
        for rank in range(2):
            result = cluster.wait_for_output("worker", rank, "sums ok")
            assert f"io threads {io_threads}\n" in result.stdout, result.describe()
        for index in range(2):
            assert io_thread_count(cluster.process("server", index).pid) == io_threads
        check_ports(cluster, io_threads, 2)
    finally:
        done.write_text("")
    cluster.wait()
    cluster.assert_ok()


@pytest.mark.parametrize("value", ["two", "-1", "65"])
def test_a_bad_io_thread_count_is_refused_by_name(tmp_path, value):
    require_build()
    env = {**os.environ, "TFPS_BIND": "127.0.0.1", "TFPS_IO_THREADS": value}
    proc = subprocess.run([PS_SERVER, "--role", "scheduler", "--port", "0", "--num-workers",
                           "1", "--num-servers", "1"], env=env, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode != 0, proc.stderr
    assert f"TFPS_IO_THREADS='{value}' is not an integer in [0, 64]" in proc.stderr, proc.stderr

"""TFPS_IO_THREADS: a job with one or two ZeroMQ I/O threads per worker and server, plain
and with the job key, gives sums equal to NumPy's bit for bit; each worker and server runs
that many I/O threads; a bad value is refused naming the variable."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cluster import PS_SERVER, require_build
from test_auth import keyed_env, make_key

sys.path.insert(0, str(Path(__file__).parent / "core_workers"))
from io_threads_worker import io_thread_count  # noqa: E402

pytestmark = pytest.mark.timeout(120)
WORKER = Path(__file__).parent / "core_workers" / "io_threads_worker.py"


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

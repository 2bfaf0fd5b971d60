"""Failures found after the rendezvous reach every member in seconds (issue 11, defect 6).

Before, a server that failed after registering (a corrupt checkpoint, a checkpoint it
could not write) or a worker that could not use the cluster (TFPS_NUM_SERVERS mismatch)
exited alone, and everyone else waited the full TFPS_TIMEOUT for it and then blamed the
network ("is it reachable from this host?"). Now the failing member tells the scheduler
why before it exits, and the scheduler tells every member, naming it. TFPS_TIMEOUT is 60
here: every survivor must fail well within it, with the reason.
"""

import sys
import time
from pathlib import Path

import pytest

from native import load_server_testing

HERE = Path(__file__).resolve().parent
LOOP_WORKER = HERE / "core_workers" / "loop_worker.py"
PS_WORKER = HERE / "ps_workers" / "notice_worker.py"
ps_testing = load_server_testing()
pytestmark = pytest.mark.timeout(240)
TIMEOUT = {"TFPS_TIMEOUT": "60"}
FAST = 25  # seconds: far below TFPS_TIMEOUT


def expect_exit(cluster, role, index, code, *texts, within=FAST):
    result = cluster.wait_for(role, index, timeout=within)
    assert result.returncode == code, result.describe()
    for text in texts:
        assert text in result.stderr, f"{text!r} not in:\n{result.describe()}"
    return result


def test_a_corrupt_checkpoint_fails_every_worker_in_seconds(make_cluster, tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for thread in range(2):
        (ckpt / ps_testing.checkpoint_file_name(0, thread)).write_bytes(b"not a checkpoint" * 8)
    cluster = make_cluster(2, 1, timeout=90,
                           env=dict(TIMEOUT, TFPS_CHECKPOINT_DIR=str(ckpt),
                                    TFPS_SERVER_THREADS="2"))
    started = time.monotonic()
    cluster.start([sys.executable, LOOP_WORKER, "5"])
    server = expect_exit(cluster, "server", 0, 1, "shard-0-")
    for rank in range(2):
        worker = expect_exit(cluster, "worker", rank, 3, "server 0 (127.0.0.1:",
                             "failed: ", "shard-0-")
        assert "is it reachable" not in worker.stderr, worker.describe()
    expect_exit(cluster, "scheduler", 0, 1, "server 0 (127.0.0.1:")
    assert time.monotonic() - started < FAST + 10, server.describe()


def test_an_unwritable_fresh_checkpoint_dir_fails_every_worker_in_seconds(make_cluster,
                                                                            tmp_path):
    # As root a read-only directory is writable; a directory where the file's temporary
    # name goes makes the server's first write fail all the same.
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / (ps_testing.checkpoint_file_name(0, 0) + ".tmp")).mkdir()
    cluster = make_cluster(2, 1, timeout=90,
                           env=dict(TIMEOUT, TFPS_CHECKPOINT_DIR=str(ckpt),
                                    TFPS_SERVER_THREADS="1"))
    cluster.start([sys.executable, LOOP_WORKER, "5"])
    expect_exit(cluster, "server", 0, 1, "cannot create checkpoint file")
    for rank in range(2):
        expect_exit(cluster, "worker", rank, 3, "server 0 (127.0.0.1:",
                    "cannot create checkpoint file")
    expect_exit(cluster, "scheduler", 0, 1, "cannot create checkpoint file")


def test_a_num_servers_mismatch_fails_every_member_in_seconds(make_cluster):
    cluster = make_cluster(3, 1, timeout=90, env=TIMEOUT)
    cluster.start(lambda rank: (["env", "TFPS_NUM_SERVERS=3"] if rank == 1 else [])
                  + [sys.executable, LOOP_WORKER, "50"])
    expect_exit(cluster, "worker", 1, 3, "expected 3 servers (TFPS_NUM_SERVERS")
    for rank in (0, 2):
        worker = expect_exit(cluster, "worker", rank, 3, "worker 1 (127.0.0.1) failed: ",
                             "expected 3 servers")
        assert "TFPS_TIMEOUT" not in worker.stderr, worker.describe()
    expect_exit(cluster, "server", 0, 1, "worker 1 (127.0.0.1) failed: ")
    expect_exit(cluster, "scheduler", 0, 1, "worker 1 (127.0.0.1) failed: ")


def test_checkpoint_write_failures_warn_the_workers_then_end_the_job(make_cluster, tmp_path):
    ckpt, go = tmp_path / "ckpt", tmp_path / "go"
    cluster = make_cluster(2, 1, timeout=150,
                           env=dict(TIMEOUT, TFPS_CHECKPOINT_DIR=str(ckpt),
                                    TFPS_CHECKPOINT_EVERY="1", TFPS_SERVER_THREADS="1"))
    cluster.start([sys.executable, PS_WORKER, str(go), "20"])
    for rank in range(2):
        cluster.wait_for_output("worker", rank, "ready", timeout=90)
    # The fresh start wrote the file; from now on no write can succeed.
    (ckpt / (ps_testing.checkpoint_file_name(0, 0) + ".tmp")).mkdir()
    go.touch()
    for rank in range(2):
        worker = expect_exit(cluster, "worker", rank, 3, "server 0 (127.0.0.1:",
                             "checkpoint write failed (1 of 3 in a row",
                             "checkpoint write failed (2 of 3 in a row",
                             "3 checkpoint writes failed in a row")
        assert "step 1 ok" in worker.stdout, worker.describe()  # warnings: training went on
    expect_exit(cluster, "server", 0, 1, "3 checkpoint writes failed in a row")


def test_a_checkpoint_claiming_too_many_updates_is_refused_naming_the_field(make_cluster,
                                                                            tmp_path):
    # 2^64-1 updates would wrap to 0 at the next update, and from then on no checkpoint
    # would ever be written again (the server waits for a common nonzero count).
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    param = dict(key=12345, partition=0, dtype=3, count=2, optimizer=0, updates=2**64 - 1,
                 value=bytes(8), slots=[])
    ps_testing.write_checkpoint(str(ckpt / ps_testing.checkpoint_file_name(0, 0)),
                                dict(server_id=0, num_servers=1, thread=0, num_threads=1,
                                     params=[param]))
    cluster = make_cluster(2, 1, timeout=90,
                           env=dict(TIMEOUT, TFPS_CHECKPOINT_DIR=str(ckpt),
                                    TFPS_CHECKPOINT_EVERY="1", TFPS_SERVER_THREADS="1"))
    started = time.monotonic()
    cluster.start([sys.executable, LOOP_WORKER, "3"])
    reason = "field 'updates' = 18446744073709551615"
    expect_exit(cluster, "server", 0, 1, "shard-0-0.ckpt is corrupt", reason)
    for rank in range(2):
        worker = expect_exit(cluster, "worker", rank, 3, "server 0 (127.0.0.1:", reason)
        assert "step 1 ok" not in worker.stdout, worker.describe()
    expect_exit(cluster, "scheduler", 0, 1, reason)
    assert time.monotonic() - started < FAST + 10


@pytest.mark.parametrize("where", ["missing", "file"])
def test_an_unusable_checkpoint_dir_fails_every_member_in_seconds(make_cluster, tmp_path,
                                                                  where):
    # Below a missing folder (only the last level is created) or below a regular file: the
    # server cannot even make the directory. Before, it exited before registering; the
    # workers waited TFPS_TIMEOUT and were asked whether every server started, and the
    # scheduler waited for it forever.
    (tmp_path / "file").write_text("not a directory")
    ckpt = tmp_path / where / "ckpt"
    cluster = make_cluster(2, 1, timeout=90,
                           env=dict(TIMEOUT, TFPS_CHECKPOINT_DIR=str(ckpt),
                                    TFPS_SERVER_THREADS="1"))
    started = time.monotonic()
    cluster.start([sys.executable, LOOP_WORKER, "3"])
    reason = f"TFPS_CHECKPOINT_DIR={ckpt} is not a directory and cannot be created"
    expect_exit(cluster, "server", 0, 1, reason)
    for rank in range(2):
        worker = expect_exit(cluster, "worker", rank, 3, "server 0 (127.0.0.1:", reason)
        assert "did every server and worker start" not in worker.stderr, worker.describe()
    expect_exit(cluster, "scheduler", 0, 1, reason)
    assert time.monotonic() - started < FAST + 10

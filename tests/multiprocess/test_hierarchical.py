"""Hierarchical aggregation (TFPS_HIERARCHICAL=1) on one host: the local workers sum
through shared memory and only local rank 0 talks to the servers.

All workers of a multiprocess cluster share this host (local_size = size), so the local
sum is the whole sum and the server only relays it: the answer must equal, bit for bit,
NumPy's sum of the ranks' arrays added in rank order. Two hosts: tests/multihost.
Workers use the C++ core without TensorFlow (they start in well under a second).
"""

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

WORKER = Path(__file__).parent / "core_workers" / "hier_worker.py"
HIER = {"TFPS_HIERARCHICAL": "1", "TFPS_PARTITION_BYTES": "65536", "TFPS_TIMEOUT": "60"}


def shm_segments():
    return sorted(p for p in os.listdir("/dev/shm") if p.startswith("tfps-"))


def stats_of(result):
    line = next(l for l in result.stdout.splitlines() if l.startswith("stats "))
    return json.loads(line[len("stats "):])


def test_three_local_workers_sum_exactly_in_rank_order(make_cluster):
    before = shm_segments()
    cluster = make_cluster(3, 2, timeout=120, env=HIER)
    cluster.start([sys.executable, WORKER, "6", "--exact"])
    cluster.wait()
    cluster.assert_ok()
    stats = [stats_of(cluster.result("worker", r)) for r in range(3)]
    for r in range(3):
        assert f"local rank {r} of 3" in cluster.result("worker", r).stdout
    # Only the leader pushes the summed tensors; the others send just their f16 and
    # broadcast pushes (flat): 6 steps x (64 x 2 bytes + no data for the broadcast).
    assert stats[1]["bytes_sent"] == stats[2]["bytes_sent"] == 6 * 64 * 2
    summed = 50_003 * 4 + 777 * 8 + 999 * 4 + 2_500_003 * 4  # 'big' goes as 3 chunks
    assert stats[0]["bytes_sent"] == 6 * (summed + 64 * 2 + 5 * 8)
    assert shm_segments() == before  # nothing left in /dev/shm


def test_two_workers_flat_and_hierarchical_give_the_same_bits(make_cluster, tmp_path):
    # Two summands: a + b == b + a in IEEE arithmetic, so both paths are exact and equal.
    digests = []
    for env in ({"TFPS_HIERARCHICAL": "0"}, {"TFPS_HIERARCHICAL": "1"}):
        digest = tmp_path / f"digest{len(digests)}"
        cluster = make_cluster(2, 2, timeout=120, env={**HIER, **env})
        cluster.start([sys.executable, WORKER, "4", "--exact", "--digest", digest])
        cluster.wait()
        cluster.assert_ok()
        digests.append(digest.read_text())
    assert digests[0] == digests[1]


def test_a_local_worker_killed_fails_the_others_naming_it(make_cluster):
    before = shm_segments()
    cluster = make_cluster(3, 1, timeout=120, env={**HIER, "TFPS_TIMEOUT": "60"})
    started = time.monotonic()
    cluster.start([sys.executable, WORKER, "100", "--die-at", "3"])
    for rank in (0, 1):
        result = cluster.wait_for("worker", rank, timeout=40)
        assert result.returncode == 3, result.describe()
        # The leader names the dead local worker (or the server its lost connection, or
        # the scheduler's notice, whichever comes first); the other member hears it from
        # the leader or the scheduler.
        assert re.search(r"local rank 2 \(rank 2.*exited|worker 2 (\(\S+\) )?is gone",
                         result.stderr), \
            result.describe()
    assert time.monotonic() - started < 40  # far below TFPS_TIMEOUT=60
    assert shm_segments() == before  # the survivors removed the dead one's too


def test_local_workers_that_disagree_on_a_shape_fail_naming_the_tensor(make_cluster):
    before = shm_segments()
    cluster = make_cluster(2, 1, timeout=120, env={**HIER, "TFPS_TIMEOUT": "10"})
    cluster.start([sys.executable, WORKER, "2", "--count-of-rank", "1:100"])
    for rank in (0, 1):
        result = cluster.wait_for("worker", rank, timeout=40)
        assert result.returncode == 3, result.describe()
        assert "'f32'" in result.stderr, result.describe()
    leader = cluster.result("worker", 0)
    assert "local rank 1 (rank 1)" in leader.stderr, leader.describe()
    assert "shape" in leader.stderr
    # The workers exited without shutdown(): their segments went at exit all the same.
    assert shm_segments() == before


def test_shared_memory_that_cannot_be_reserved_is_a_clear_error_not_a_crash(make_cluster):
    # Segments are memfds: ulimit -f 1 MB keeps the 10 MB tensor's 4 MB chunks from being
    # reserved (Python ignores SIGXFSZ, so ftruncate fails). Without the reservation a
    # write into the mapping would die of SIGBUS once memory runs out.
    cluster = make_cluster(2, 1, timeout=120, env={**HIER, "TFPS_TIMEOUT": "20"})
    cluster.start(["prlimit", "--fsize=1048576", sys.executable, WORKER, "1", "--only", "big"])
    reserved = 0
    for rank in (0, 1):
        result = cluster.wait_for("worker", rank, timeout=60)
        assert result.returncode == 3, result.describe()
        if "cannot reserve" in result.stderr:
            assert "TFPS_HIERARCHICAL=0" in result.stderr, result.describe()
            reserved += 1
        else:  # the other failed first, and the scheduler told this one so at once
            assert f"the job cannot go on: worker {1 - rank}" in result.stderr, \
                result.describe()
    assert reserved >= 1


@pytest.mark.parametrize("hierarchical", ["0", "1"])
def test_colocated_servers_through_shared_memory(make_cluster, hierarchical):
    # TFPS_SHM_SERVER=1: every server is on this host, so every partition too large to be
    # fused goes through a segment shared with its server; the sums must not change.
    before = shm_segments()
    cluster = make_cluster(3, 2, timeout=120, env={**HIER, "TFPS_SHM_SERVER": "1",
                                                   "TFPS_HIERARCHICAL": hierarchical})
    cluster.start([sys.executable, WORKER, "4"] + (["--exact"] if hierarchical == "1" else []))
    cluster.wait()
    cluster.assert_ok()
    assert shm_segments() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="/proc/self/map_files needs CAP_SYS_ADMIN")
def test_a_local_member_that_shrinks_the_segments_cannot_kill_its_leader(make_cluster):
    # Before step 1 both members ftruncate every segment they have mapped (their own, which
    # the leader sums out of, and the leader's) to 0, as a hostile local worker would. The
    # segments are sealed: the kernel refuses, and the leader (and everyone) goes on with
    # exact sums. Unsealed, the leader would die of SIGBUS at its next read.
    before = shm_segments()
    cluster = make_cluster(3, 1, timeout=120, env=HIER)
    cluster.start([sys.executable, WORKER, "3", "--exact", "--shrink-at", "1"])
    cluster.wait()
    cluster.assert_ok()
    tried = [re.search(r"shrink refused (\d+) shrunk (\d+)", cluster.result("worker", r).stdout)
             for r in range(3)]
    tried = [m for m in tried if m is not None]
    assert len(tried) == 2, [cluster.result("worker", r).stdout for r in range(3)]
    for m in tried:
        assert int(m[1]) >= 2 and m[2] == "0", m[0]
    assert shm_segments() == before


def test_a_worker_killed_under_shm_server_fails_the_others_and_no_server_crashes(make_cluster):
    # TFPS_SHM_SERVER=1, flat: the servers sum the survivors' pushes straight out of their
    # segments while rank 2 is dead; the rounds fail naming it, and no server reads
    # unmapped memory (a SIGSEGV/SIGBUS would show as a negative exit code).
    before = shm_segments()
    cluster = make_cluster(3, 2, timeout=120, env={**HIER, "TFPS_SHM_SERVER": "1",
                                                   "TFPS_HIERARCHICAL": "0"})
    started = time.monotonic()
    cluster.start([sys.executable, WORKER, "100", "--die-at", "3"])
    for rank in (0, 1):
        result = cluster.wait_for("worker", rank, timeout=40)
        assert result.returncode == 3, result.describe()
        assert re.search(r"worker 2 (\(127.0.0.1\) )?is gone", result.stderr), result.describe()
    assert time.monotonic() - started < 40  # far below TFPS_TIMEOUT=60
    for index in (0, 1):
        result = cluster.wait_for("server", index, timeout=40)
        assert result.returncode in (0, 1), result.describe()
    assert shm_segments() == before

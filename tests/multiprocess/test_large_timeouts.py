"""Timeouts larger than the machinery can carry are clamped with a warning, not fatal.

TFPS_HEARTBEAT_TIMEOUT above 6553.5 s made ZeroMQ refuse the socket option (its TTL travels
in deciseconds in 16 bits): ps_server aborted (exit 134) and the worker died. TFPS_TIMEOUT
of 1e10 s overflowed the engine's deadline (nanoseconds in 64 bits), so every push_pull
failed at once "after -2147483648 s". A job with both values now trains, and every role
says what it used instead.
"""

import subprocess
import sys
from pathlib import Path

from native import PS_SERVER

WORKER = Path(__file__).parent / "core_workers" / "loop_worker.py"
HUGE = {"TFPS_TIMEOUT": "1e10", "TFPS_HEARTBEAT_TIMEOUT": "7200"}


def test_a_job_with_huge_timeouts_trains_and_says_what_it_clamped(make_cluster):
    cluster = make_cluster(2, 1, timeout=60, env=HUGE)
    cluster.start([sys.executable, WORKER, "5"])
    cluster.wait()
    cluster.assert_ok()
    for rank in range(2):
        assert "step 4 ok" in cluster.result("worker", rank).stdout
    for role, index in (("scheduler", 0), ("server", 0), ("worker", 0)):
        log = cluster.result(role, index).stderr
        assert "TFPS_HEARTBEAT_TIMEOUT=7200 is above the largest ZeroMQ can carry" in log, log
        assert "TFPS_TIMEOUT=1e10 is above the largest supported" in log, log


def test_a_timeout_that_is_not_a_number_still_fails_naming_it():
    for name, value in (("TFPS_TIMEOUT", "nan"), ("TFPS_HEARTBEAT_TIMEOUT", "-1"),
                        ("TFPS_TIMEOUT", "soon")):
        done = subprocess.run([PS_SERVER, "--role", "scheduler", "--num-workers", "1",
                               "--num-servers", "1"], env={name: value}, capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 2 and name in done.stderr, (name, value, done)

"""Smoke test of the multi-host harness (benchmarks/netns.py): two emulated hosts on a
tbf-limited 1 Gbit/s bridge, a scheduler, a ps_server and a TensorFlow-free worker per
host, push_pulls checked against NumPy; the hosts reach nothing but each other; every
namespace is gone afterwards, also after an exception, SIGTERM or SIGINT.

Needs root and `ip netns` (skipped otherwise, with the reason). A few seconds.
"""

import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from netns_support import AVAILABLE, WHY_NOT, namespaces, require_build  # noqa: E402
from netns import Hosts  # noqa: E402
from ps_cluster import NetnsCluster  # noqa: E402
from sigint import default_sigint  # noqa: E402

WORKER = Path(__file__).parent / "sum_worker.py"

pytestmark = [pytest.mark.skipif(not AVAILABLE, reason=WHY_NOT), pytest.mark.timeout(120)]


def connect_errno(hosts, i, address, port=9):
    """errno of a TCP connect from inside host i (0: connected)."""
    code = ("import socket\ns = socket.socket()\ns.settimeout(5)\n"
            "print(s.connect_ex((%r, %d)))" % (address, port))
    result = hosts.run(i, [sys.executable, "-c", code], timeout=30, capture_output=True,
                       text=True)
    assert result.returncode == 0, result.stderr
    return int(result.stdout)


def test_push_pull_across_two_rate_limited_hosts(tmp_path):
    require_build("_core*.so")
    with Hosts(2, rate="1gbit") as hosts:
        for i in range(2):
            assert "tbf" in hosts.qdisc(i) and "1Gbit" in hosts.qdisc(i)
        tx_before = [hosts.link_bytes(i)[0] for i in range(2)]
        cluster = NetnsCluster(hosts, tmp_path, timeout=60, env={"TFPS_TIMEOUT": "30"})
        try:
            cluster.start(lambda rank: [sys.executable, WORKER])
            cluster.wait()
            cluster.check()
        finally:
            cluster.close()
        for rank in range(2):
            assert cluster.result("worker", rank).stdout.startswith("ok")
        # Half of each 8 MB tensor lives on the other host's server: push and reply cross
        # the veth (3 steps x 2 x 4 MB each way), not loopback.
        for i in range(2):
            sent = hosts.link_bytes(i)[0] - tx_before[i]
            assert sent >= 3 * 2 * (4 << 20), "host %d sent only %d bytes on eth0" % (i, sent)
    assert not set(hosts.names + [hosts.bridge_ns]) & namespaces()


def test_hosts_reach_each_other_and_nothing_else():
    with Hosts(2) as hosts:
        outside = ["192.0.2.1", "198.51.100.7"]  # TEST-NET: never routed anywhere
        root = subprocess.run(["ip", "-o", "-4", "addr", "show", "scope", "global"],
                              capture_output=True, text=True, timeout=20).stdout.split()
        outside += [w.split("/")[0] for w, prev in zip(root[1:], root) if prev == "inet"][:1]
        for address in outside:
            assert connect_errno(hosts, 0, address) == errno.ENETUNREACH, address
        # The other host answers (nothing listens on port 9: refused, not unreachable).
        assert connect_errno(hosts, 0, hosts.address(1)) == errno.ECONNREFUSED


def test_cleanup_after_an_exception_kills_processes_and_deletes_namespaces():
    with pytest.raises(RuntimeError, match="boom"):
        with Hosts(2, rate="10gbit") as hosts:
            sleeper = hosts.popen(1, ["sleep", "60"])
            names = set(hosts.names + [hosts.bridge_ns])
            assert names <= namespaces()
            raise RuntimeError("boom")
    assert sleeper.wait(timeout=5) is not None
    assert not names & namespaces()
    assert hosts.leftovers() == []


_HOLDER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, %r)
    from netns import Hosts
    with Hosts(2) as hosts:
        child = hosts.popen(0, ["sleep", "60"])
        print(" ".join(hosts.names + [hosts.bridge_ns]), child.pid, flush=True)
        time.sleep(60)
""") % str(REPO / "benchmarks")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cleanup_on_signal(sig):
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        line = holder.stdout.readline().split()
        assert line, holder.stderr.read()
        names, child = set(line[:-1]), int(line[-1])
        assert names <= namespaces()
        holder.send_signal(sig)
        holder.wait(timeout=30)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert holder.returncode != 0
    assert not names & namespaces()
    time.sleep(0.1)
    assert not os.path.exists("/proc/%d" % child) or "Z" in open(
        "/proc/%d/stat" % child).read().rsplit(")", 1)[1].split()[0]

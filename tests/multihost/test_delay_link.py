"""The emulated link with added latency (benchmarks/delay_link.py): two hosts joined by TUN
devices and a relay that holds every packet D ms. ICMP echo RTTs are at least 2 D and not
much more; a tf_ps_ops push_pull across it is still correct (checked against NumPy by
sum_worker.py) and its bytes went through the relay; nothing is left afterwards.

Needs root, `ip netns` and /dev/net/tun (skipped otherwise, with the reason). ~10 s.
"""

import json
import os
import statistics
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
from netns_support import AVAILABLE, WHY_NOT, namespaces, require_build  # noqa: E402
from delay_link import DelayHosts, tun_available  # noqa: E402
from ps_cluster import NetnsCluster  # noqa: E402

TUN, WHY_NO_TUN = tun_available()
WORKER = Path(__file__).parent / "sum_worker.py"
DELAY_MS = 15.0
SLACK_MS = 25.0  # scheduling on a shared 2-core machine; the relay itself adds < 1 ms

pytestmark = [pytest.mark.skipif(not AVAILABLE, reason=WHY_NOT),
              pytest.mark.skipif(not TUN, reason=WHY_NO_TUN), pytest.mark.timeout(120)]


def test_delay_is_added_and_push_pull_is_correct_across_it(tmp_path):
    require_build("_core*.so")
    with DelayHosts(2, rate="1gbit", delay_ms=DELAY_MS) as hosts:
        names = set(hosts.names + [hosts.bridge_ns])
        relay = hosts.relay
        assert "tbf" in hosts.qdisc(0)
        ping = hosts.run(0, [sys.executable, REPO / "benchmarks" / "delay_link.py", "ping",
                             hosts.address(1), "5"], timeout=60, capture_output=True, text=True)
        assert ping.returncode == 0, ping.stderr
        rtts = json.loads(ping.stdout)
        assert len(rtts) == 5
        assert min(rtts) >= 2 * DELAY_MS, rtts
        assert statistics.median(rtts) < 2 * DELAY_MS + SLACK_MS, rtts

        tx_before = hosts.link_bytes(0)[0]
        cluster = NetnsCluster(hosts, tmp_path, timeout=90, env={"TFPS_TIMEOUT": "60"})
        try:
            cluster.start(lambda rank: [sys.executable, WORKER])
            cluster.wait()
            cluster.check()
        finally:
            cluster.close()
        for rank in range(2):
            assert cluster.result("worker", rank).stdout.startswith("ok")
        # Half of each 8 MB tensor lives on the other host's server: 3 steps x 4 MB out.
        assert hosts.link_bytes(0)[0] - tx_before >= 3 * (4 << 20)
        stats = hosts.relay_stats()
        assert stats["bytes"] >= 2 * 3 * (4 << 20), stats
        assert stats["dropped_queue_full"] == 0 and stats["write_errors"] == 0, stats
    assert relay.poll() is not None
    assert not names & namespaces()
    assert not os.path.exists(hosts._tmp)


def test_relay_rejects_a_negative_delay():
    with pytest.raises(ValueError, match="delay_ms"):
        DelayHosts(2, delay_ms=-1)

"""Worker <-> colocated server through shared memory (TFPS_SHM_SERVER) across emulated
hosts: 3 namespace hosts on a bridge (10 Gbit/s tbf links), the scheduler on host 0, a
server and one worker on each of hosts 1 and 2 (BytePS's colocated layout). The same job
runs with loopback TCP (TFPS_SHM_SERVER=0) and with shared memory (=1); every answer
must equal NumPy's sum bit for bit (2 summands), and, counted by the interfaces' own
counters: the host links carry the remote half either way, the shared-memory run's
loopback carries next to nothing (heads and fused small tensors) where the TCP run's carries the colocated
half. Needs root and `ip netns` (skipped otherwise). ~10-20 s.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(Path(__file__).parent))
from netns_support import AVAILABLE, WHY_NOT, namespaces, require_build  # noqa: E402
from netns import Hosts  # noqa: E402
from test_hierarchical_hosts import SUM_WORKER, TwoHostJob  # noqa: E402

pytestmark = [pytest.mark.skipif(not AVAILABLE, reason=WHY_NOT), pytest.mark.timeout(300)]

STEPS = 2


def tx_bytes(hosts, i, dev):
    text = subprocess.run(["ip", "-n", hosts.names[i], "-j", "-s", "link", "show", "dev", dev],
                          check=True, capture_output=True, text=True).stdout
    return json.loads(text)[0]["stats64"]["tx"]["bytes"]


def run(hosts, tmp_path, shm):
    devices = [(i, dev) for i in (1, 2) for dev in ("eth0", "lo")]
    before = {d: tx_bytes(hosts, *d) for d in devices}
    job = TwoHostJob(hosts, tmp_path / f"logs{shm}",
                     {"TFPS_SHM_SERVER": str(shm), "TFPS_HIERARCHICAL": "0"},
                     worker_hosts=(0, 1))
    try:
        job.start([sys.executable, SUM_WORKER, str(STEPS), "--exact"])
        job.wait()
        failed = job.failures()
        assert not failed, "\n".join(r.describe() for r in failed)
    finally:
        job.close()
    sent = {d: tx_bytes(hosts, *d) - before[d] for d in devices}
    stats = [json.loads(next(line[6:] for line in r.stdout.splitlines()
                             if line.startswith("stats "))) for r in job.worker_results()]
    return sent, stats


def test_the_colocated_half_crosses_neither_the_link_nor_loopback(tmp_path):
    require_build("_core*.so")
    with Hosts(3, rate="10gbit") as hosts:
        names = set(hosts.names + [hosts.bridge_ns])
        tcp, tcp_stats = run(hosts, tmp_path, 0)
        shm, shm_stats = run(hosts, tmp_path, 1)
    assert not names & namespaces()
    # The engine pushes the same bytes either way (its counter counts both halves)...
    pushed = [s["bytes_sent"] for s in tcp_stats]
    assert [s["bytes_sent"] for s in shm_stats] == pushed
    assert min(pushed) > STEPS * 10_000_000  # the 10 MB tensor each step
    for host, rank in ((1, 0), (2, 1)):
        # ...the link carries its remote half (a push out, a reply to the other worker)
        # in both runs, within the noise of heads, heartbeats and ARP...
        remote = pushed[rank] / 2
        assert 0.8 * remote < shm[(host, "eth0")] < 1.5 * remote * 2, (host, shm, remote)
        assert 0.75 < shm[(host, "eth0")] / tcp[(host, "eth0")] < 1.33, (host, shm, tcp)
        # ...and the colocated half goes over loopback TCP only without shared memory:
        # push and reply, ~2 x half of what the worker pushed, against heads and the
        # small tensors that go fused (TFPS_FUSION_BYTES) over the socket: ~2% here.
        assert tcp[(host, "lo")] > 0.8 * pushed[rank], (host, tcp)
        assert shm[(host, "lo")] < 0.05 * tcp[(host, "lo")], (host, shm, tcp)

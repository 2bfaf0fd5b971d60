"""GPU tensors are summed with NCCL only where every local worker can use it (docs/gpu.md).
Here NCCL is made unloadable (TFPS_NCCL_LIBRARY names no file) and there is no GPU: a CUDA
build must say once, on the local leader, that it sums through shared memory, naming the
library it could not open and what to install, and every hierarchical push_pull must still
be exact. The worker is the GPU script's NCCL worker (tests/gpu/nccl_worker.py) in its dry
run on the CPU, which also keeps that script working. A CPU build offers no NCCL: it says
nothing and sums the same. The choice itself: tests/unit/test_device_reduce_choice.py."""

import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).resolve().parents[1] / "gpu" / "nccl_worker.py"
pytestmark = pytest.mark.timeout(200)
MISSING = "/nonexistent/tfps-test/libnccl.so.2"


def test_missing_nccl_is_said_once_and_sums_go_through_shared_memory(make_cluster):
    cluster = make_cluster(2, 1, timeout=150, env={
        "GPU_CHECKS_DEVICE": "/CPU:0", "TFPS_HIERARCHICAL": "1", "TFPS_NCCL_LIBRARY": MISSING,
        "TFPS_LOG_LEVEL": "info"})
    cluster.start([sys.executable, str(WORKER)])
    cluster.wait()
    cluster.assert_ok()
    leader, member = cluster.result("worker", 0), cluster.result("worker", 1)
    for result in (leader, member):
        assert result.stdout.count(" PASS ") == 2 * 5 + 1, result.describe()
    said = [line for line in leader.stderr.splitlines() if "NCCL" in line]
    if "cuda_build 1" not in leader.stdout:
        assert said == [], leader.describe()
        return
    assert len(said) == 1, leader.describe()  # once, by the local leader
    assert ("GPU tensors are summed through shared memory, not NCCL: local rank 0 (rank 0) "
            "cannot use NCCL: NCCL cannot be opened (" + MISSING + ")") in said[0], said[0]
    assert "pip install tf_ps_ops[gpu]" in said[0] and "TFPS_NCCL_LIBRARY" in said[0], said[0]
    assert "NCCL" not in member.stderr, member.describe()

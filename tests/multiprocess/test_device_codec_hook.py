"""The engine's side of compression on the GPU (engine/device_codec.h): a worker whose
push_pulls go through the DeviceCodec hook, driven by the host twin of the GPU codec
kernels (codec/codec_shared.h: the kernels' algorithms, run on the CPU), among CPU workers,
gets bit for bit what an all-CPU job gets, for every codec with error feedback over 3
steps, a tensor of several partitions and small tensors fused into one message. So the
hook gets the CPU path's partitions, seeds, steps and replies, and the GPU worker's bytes
are the CPU worker's (docs/gpu.md, "Compression on the GPU")."""

import sys
from pathlib import Path

import numpy as np
import pytest

WORKER = Path(__file__).parent / "core_workers" / "device_codec_worker.py"
pytestmark = pytest.mark.timeout(200)


def run(make_cluster, out, mode):
    cluster = make_cluster(2, 2, timeout=90,
                           env={"TFPS_TIMEOUT": "30", "TFPS_PARTITION_BYTES": "16384",
                                "TFPS_FUSION_BYTES": "65536", "TFPS_COMPRESSION": "int8",
                                "DEVICE_CODEC_MODE": mode, "DEVICE_CODEC_OUT": str(out)})
    cluster.start([sys.executable, str(WORKER)])
    cluster.wait()
    cluster.assert_ok()
    for rank in range(2):
        stdout = cluster.result("worker", rank).stdout
        assert "EncodesOnDevice: as expected" in stdout, stdout
        assert f"hook={mode == 'hook' and rank == 0}" in stdout, stdout


def test_a_hooked_worker_gets_what_cpu_workers_get(make_cluster, tmp_path):
    run(make_cluster, tmp_path, "cpu")
    run(make_cluster, tmp_path, "hook")
    for rank in range(2):
        cpu = np.load(tmp_path / f"cpu_rank{rank}.npz")
        hook = np.load(tmp_path / f"hook_rank{rank}.npz")
        assert sorted(cpu.files) == sorted(hook.files)
        assert len(cpu.files) == 7 * 4 * 3
        for key in cpu.files:
            np.testing.assert_array_equal(hook[key].view(np.uint32), cpu[key].view(np.uint32),
                                          err_msg=f"rank {rank} {key}")

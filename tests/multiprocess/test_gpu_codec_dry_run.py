"""tests/gpu/codec_worker.py (run_gpu_checks.sh part 4: compressed push_pull on GPU
tensors) run on the CPU, two workers and two servers, a tensor cut into 2 partitions: its step-1
oracles (the CPU codecs applied as the servers do, bit-exact; NumPy within each codec's
bound) hold for the CPU path, and its output file is what compare_codec_runs.py reads.
So the GPU part checks the GPU against oracles that are known right here."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

GPU_DIR = Path(__file__).resolve().parents[1] / "gpu"
pytestmark = pytest.mark.timeout(300)


def test_the_codec_worker_passes_on_the_cpu(make_cluster, tmp_path):
    cluster = make_cluster(2, 2, timeout=240,
                           env={"CODEC_WORKER_DEVICE": "cpu", "TFPS_GPU_OUT": str(tmp_path),
                                "TFPS_PARTITION_BYTES": "262144",
                                # one size that makes 2 partitions, 2 steps: CI's budget
                                "CODEC_WORKER_SIZES": "70000", "CODEC_WORKER_STEPS": "2"})
    cluster.start([sys.executable, str(GPU_DIR / "codec_worker.py")])
    cluster.wait()
    cluster.assert_ok()
    for rank in range(2):
        stdout = cluster.result("worker", rank).stdout
        for name in ("fp16", "bf16", "int8", "onebit", "topk"):
            assert f"PASS  {name} n=70000 step 1 bit-equal to the CPU codecs" in stdout, stdout
        assert stdout.count("step 1 vs NumPy") == 6, stdout
        out = np.load(tmp_path / f"codec_cpu_rank{rank}.npz")
        assert len(out.files) == 6 * 1 * 2
    # The comparison script: a run equal to itself passes, a changed bit fails.
    for rank in range(2):
        data = dict(np.load(tmp_path / f"codec_cpu_rank{rank}.npz"))
        (tmp_path / f"codec_same_rank{rank}.npz").write_bytes(
            (tmp_path / f"codec_cpu_rank{rank}.npz").read_bytes())
        data["int8_70000_2"] = data["int8_70000_2"].copy()
        data["int8_70000_2"].view(np.uint32)[7] ^= 1
        np.savez(tmp_path / f"codec_flipped_rank{rank}.npz", **data)
    compare = [sys.executable, str(GPU_DIR / "compare_codec_runs.py"), str(tmp_path)]
    assert subprocess.run(compare + ["same"], capture_output=True).returncode == 0
    flipped = subprocess.run(compare + ["flipped"], capture_output=True, text=True)
    assert flipped.returncode == 1
    assert "FAIL  flipped rank 0 int8_70000_2" in flipped.stdout

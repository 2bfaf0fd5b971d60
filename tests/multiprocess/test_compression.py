"""Compressed push_pull across processes (docs/compression.md): every codec, with and
without error feedback, against the NumPy model of the same arithmetic; the job default
(TFPS_COMPRESSION); bytes on the wire as the engine counts them."""

import sys
from pathlib import Path

WORKER = Path(__file__).parent / "core_workers" / "codec_worker.py"


def test_compressed_push_pull_matches_the_numpy_model(make_cluster):
    cluster = make_cluster(3, 2, timeout=120,
                           env={"TFPS_TIMEOUT": "30", "TFPS_PARTITION_BYTES": "16384",
                                "TFPS_COMPRESSION": "int8"})
    cluster.start([sys.executable, WORKER])
    cluster.wait()
    cluster.assert_ok()
    for rank in range(3):
        out = cluster.result("worker", rank).stdout
        for spec in ["fp16", "bf16", "int8", "onebit", "topk:0.05", "randomk:0.1", "default"]:
            assert f"{spec} feedback=True: 3 steps match" in out, out
        assert "onebit feedback=False: 3 steps match" in out, out
        assert "disagreement error" in out, out


def test_tf_ops_and_training_with_compression(make_cluster):
    workers = Path(__file__).resolve().parent / "workers"
    sys.path.insert(0, str(workers))
    import harness

    cluster = make_cluster(3, 2, timeout=240)
    harness.run_and_check(cluster, workers / "compression_worker.py")
    out = cluster.result("worker", 0).stdout
    print("\n".join(line for line in out.splitlines() if "loss" in line))


def test_compressed_ps_mode_pushes_match_the_numpy_model(make_cluster):
    """PS mode: compressed gradients decoded on the server, averaged, the optimizer applied
    in float32 (SGD and momentum), the parameter answered uncompressed."""
    cluster = make_cluster(3, 2, timeout=120,
                           env={"TFPS_TIMEOUT": "30", "TFPS_PARTITION_BYTES": "16384",
                                "TFPS_COMPRESSION": "int8"})
    cluster.start([sys.executable, Path(__file__).parent / "core_workers" / "ps_codec_worker.py"])
    cluster.wait()
    cluster.assert_ok()
    for rank in range(3):
        out = cluster.result("worker", rank).stdout
        for spec in ["fp16", "bf16", "int8", "onebit", "topk:0.05", "randomk:0.1", "default"]:
            assert f"ps {spec} feedback=True momentum=False: 4 steps match" in out, out
        assert "ps onebit feedback=False momentum=False: 4 steps match" in out, out
        assert "ps onebit feedback=True momentum=True: 4 steps match" in out, out
        assert "ps topk:0.01 feedback=True momentum=True: 4 steps match" in out, out
        assert "disagreement error" in out, out

"""PS-mode checkpoints: the servers' own (TFPS_CHECKPOINT_DIR) across a SIGKILL and a
restart, and a Keras save/load_weights whose values push_variables sends back."""

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from native import load_core, load_server_testing

WORKER = Path(__file__).resolve().parent / "ps_workers" / "checkpoint_worker.py"
LOOP_WORKER = Path(__file__).resolve().parent / "core_workers" / "loop_worker.py"
PARTITION_BYTES = 64  # the 6x5 kernel (120 bytes) spans both servers
SHAPES = {"sequential/dense/kernel": (6, 5), "sequential/dense/bias": (5,),
          "sequential/dense_1/kernel": (5, 3), "sequential/dense_1/bias": (3,)}
pytestmark = pytest.mark.timeout(300)
core = load_core()
ps_testing = load_server_testing()


def load(out, what, rank):
    with np.load(out / f"{what}-rank{rank}.npz") as npz:
        return {name.replace("|", "/"): npz[name] for name in npz.files}


def read_files(directory):
    return {path.name: ps_testing.read_checkpoint(str(path))
            for path in sorted(directory.glob("shard-*-*.ckpt"))}


def values_in(files):
    """Every variable, reassembled from its partitions in the checkpoint files."""
    parts = {}
    for data in files.values():
        for p in data["params"]:
            parts[(p["key"], p["partition"])] = p
    out = {}
    for path, shape in SHAPES.items():
        key = core.key_of_name("ps:" + path)
        total = int(np.prod(shape))
        pieces = [np.frombuffer(parts[(key, index)]["value"], np.float32)
                  for index, _, _, _ in core.partition_tensor(key, total, 4, PARTITION_BYTES, 2)]
        out[path] = np.concatenate(pieces).reshape(shape)
    return out


def assert_same_bytes(got, want, what):
    assert set(got) == set(want), what
    for path in want:
        assert got[path].tobytes() == want[path].tobytes(), f"{what}: {path}"


def test_server_checkpoint_survives_sigkill_and_restores_bit_for_bit(make_cluster, tmp_path):
    ckpt, run1, run2, go = (tmp_path / "ckpt", tmp_path / "run1", tmp_path / "run2",
                            tmp_path / "go")
    run1.mkdir()
    run2.mkdir()
    env = {"TFPS_CHECKPOINT_DIR": str(ckpt), "TFPS_CHECKPOINT_EVERY": "3",
           "TFPS_PARTITION_BYTES": str(PARTITION_BYTES), "TFPS_SERVER_THREADS": "2",
           "TFPS_TIMEOUT": "60"}
    first = make_cluster(2, 2, timeout=150, env=env)
    first.start(lambda rank: [sys.executable, WORKER, "train", run1, go])
    for rank in range(2):
        first.wait_for_output("worker", rank, "trained", timeout=120)
    # Steps 1-5 ran; the files hold step 3 (TFPS_CHECKPOINT_EVERY=3), one per server thread.
    files = read_files(ckpt)
    assert sorted(files) == [f"shard-{s}-{t}.ckpt" for s in range(2) for t in range(2)]
    params = [p for data in files.values() for p in data["params"]]
    assert len(params) == 5  # kernel 2 partitions, the rest 1 each
    assert {p["updates"] for p in params} == {3}
    assert all(p["optimizer"] == 3 and len(p["slots"]) == 1 for p in params)  # KerasMomentum
    step3 = load(run1, "step3", 0)
    assert_same_bytes(values_in(files), step3, "checkpoint vs step-3 values")
    snapshot = {name: (ckpt / name).read_bytes() for name in files}

    first.kill("server", 0)
    go.touch()
    for rank in range(2):
        result = first.wait_for("worker", rank, timeout=60)
        assert result.returncode == 0 and "server loss seen" in result.stdout, result.describe()
    assert first.wait_for("server", 0, timeout=10).killed
    for role in ("server", "scheduler"):  # the survivors: told the job failed, naming it
        result = first.wait_for(role, 1 if role == "server" else 0, timeout=30)
        assert result.returncode == 1, result.describe()
        assert "disconnected from the scheduler without shutting down" in result.stderr, \
            result.describe()
    # Steps 4-5 happened after the checkpoint; the survivor wrote nothing since.
    assert {name: (ckpt / name).read_bytes() for name in files} == snapshot
    saved = tmp_path / "ckpt-at-step3"
    shutil.copytree(ckpt, saved)

    # The restarted job: servers restore their shards before serving; workers adopt them.
    second = make_cluster(2, 2, timeout=150, env=env)
    second.start(lambda rank: [sys.executable, WORKER, "resume", run2])
    second.wait()
    second.assert_ok()
    restored = [re.search(r"restored (\d+) parameter partition\(s\) .* updated 3 time",
                          second.result("server", index).stderr) for index in range(2)]
    assert all(restored), [second.result("server", index).describe() for index in range(2)]
    assert sum(int(match.group(1)) for match in restored) == 5
    for rank in range(2):
        assert_same_bytes(load(run2, "restored", rank), step3, f"rank {rank} restored")
        # Momentum slots came back too: steps 4-5 repeat the uninterrupted run exactly.
        assert_same_bytes(load(run2, "step5", rank), load(run1, "step5", 0),
                          f"rank {rank} after steps 4-5")
    # No multiple of 3 was reached again: the files are still the checkpointed ones.
    assert {name: (ckpt / name).read_bytes() for name in files} == snapshot


def test_restarting_with_other_threads_or_servers_fails_clearly(make_cluster, tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for server in range(2):
        for thread in range(2):
            ps_testing.write_checkpoint(str(ckpt / ps_testing.checkpoint_file_name(server, thread)),
                                  dict(server_id=server, num_servers=2, thread=thread,
                                       num_threads=2, params=[]))
    cluster = make_cluster(1, 2, timeout=30, server_grace=15,
                           env={"TFPS_CHECKPOINT_DIR": str(ckpt), "TFPS_SERVER_THREADS": "3",
                                "TFPS_TIMEOUT": "3"})
    cluster.start([sys.executable, LOOP_WORKER, "1"])
    for index in range(2):
        result = cluster.wait_for("server", index, timeout=20)
        assert result.returncode == 1, result.describe()
        assert "TFPS_SERVER_THREADS (3 now)" in result.stderr, result.describe()
    # The worker finds no server to talk to (after TFPS_TIMEOUT); the scheduler sees it go.
    worker = cluster.wait_for("worker", 0, timeout=20)
    assert worker.returncode == 3, worker.describe()
    scheduler = cluster.wait_for("scheduler", 0, timeout=20)
    assert scheduler.returncode == 1, scheduler.describe()


def test_load_weights_then_push_variables_continues_from_the_restored_values(make_cluster,
                                                                               tmp_path):
    cluster = make_cluster(2, 2, timeout=150,
                           env={"TFPS_PARTITION_BYTES": str(PARTITION_BYTES), "TFPS_TIMEOUT": "60"})
    cluster.start(lambda rank: [sys.executable, WORKER, "restore", tmp_path])
    cluster.wait()
    cluster.assert_ok()
    for rank in range(2):
        assert "done" in cluster.result("worker", rank).stdout
    assert_same_bytes(load(tmp_path, "step6", 1), load(tmp_path, "step6", 0), "replicas")

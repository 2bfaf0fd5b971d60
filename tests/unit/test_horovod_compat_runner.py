"""The pieces benchmarks/horovod_compat runs Horovod's own files with: the shim resolves
every `horovod.*` module Horovod 0.28.1's TF test files and examples import to tf_ps_ops,
summarize.py counts per test and subtest from tfps_report.py's lines, and synthetic_mnist
keeps keras.datasets.mnist.load_data()'s contract. No cluster: nothing here talks."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
COMPAT = ROOT / "benchmarks" / "horovod_compat"
sys.path.insert(0, str(COMPAT))
import summarize  # noqa: E402
import synthetic_mnist  # noqa: E402


def test_shim_resolves_horovods_imports_to_tf_ps_ops():
    # In a fresh interpreter: the shim must not be shadowed by this process's modules.
    code = """
import horovod.tensorflow as hvd, horovod.tensorflow.keras as hvd_keras, horovod.keras
import tf_ps_ops.keras, tf_ps_ops.tensorflow
from horovod.tensorflow.util import _executing_eagerly
from horovod.common.util import is_version_greater_equal_than
assert hvd.allreduce is tf_ps_ops.tensorflow.allreduce and hvd.Average is tf_ps_ops.tensorflow.Average
assert hvd_keras is tf_ps_ops.keras
assert horovod.keras.DistributedOptimizer is tf_ps_ops.keras.DistributedOptimizer
assert _executing_eagerly()
assert is_version_greater_equal_than("2.21.0", "2.9.0")
assert not is_version_greater_equal_than("2.5.0-tf", "2.6.0")
print("ok")
"""
    env = {"PYTHONPATH": f"{ROOT}:{COMPAT / 'shim'}", "PATH": "/usr/bin:/bin",
           "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_summarize_counts_subtests_and_keeps_reasons(tmp_path):
    records = [("test_a", "graph_mode", "passed", ""), ("test_a", "eager_mode", "failed", "E: x"),
               ("test_a", None, "passed", ""),  # the parent of subtests: not a unit
               ("test_b", None, "skipped", "no gpu"), ("test_c", None, "passed", ""),
               ("test_d", None, "failed", "ValueError: bad")]
    path = tmp_path / "worker0.jsonl"
    path.write_text("".join(json.dumps({"test": t, "subtest": s, "outcome": o, "when": "call",
                                        "reason": r}) + "\n" for t, s, o, r in records))
    assert summarize.parse(path) == {
        "test_a[graph_mode]": ("passed", ""), "test_a[eager_mode]": ("failed", "E: x"),
        "test_b": ("skipped", "no gpu"), "test_c": ("passed", ""),
        "test_d": ("failed", "ValueError: bad")}


def test_synthetic_mnist_has_mnists_shapes_and_a_learnable_label():
    (x, y), (x_test, y_test) = synthetic_mnist.load_data(path="mnist-0.npz")
    assert x.shape == (60000, 28, 28) and x_test.shape == (10000, 28, 28)
    assert y.shape == (60000,) and y_test.shape == (10000,)
    assert x.dtype == np.uint8 and y.dtype == np.uint8 and set(np.unique(y)) == set(range(10))
    # The label is the bright band's row: (row - 4) / 2.
    rows = np.argmax((x_test == 255).all(axis=2), axis=1)
    np.testing.assert_array_equal((rows - 4) // 2, y_test)
    np.testing.assert_array_equal(synthetic_mnist.load_data()[0][0][:5], x[:5])  # every rank

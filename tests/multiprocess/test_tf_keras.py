"""tf_keras (Keras 2) through Horovod's Keras API (tf_keras_workers/tf_keras_worker.py, 2
workers and 1 server), each check against single-process TensorFlow on the same data:
DistributedOptimizer (fit, custom loops, backward_passes_per_step, compression, op,
predivide, process sets) over tf_keras' new and legacy optimizers, the callbacks,
load_model, the elastic Keras state and callbacks, PS-mode optimizers and sfb.convert.

With TF_USE_LEGACY_KERAS=1 (tf.keras is tf_keras, set before TensorFlow is imported); then
the checks where it matters which Keras `tf.keras` is (tf_keras_direct_worker.py) with
tf_keras imported directly while tf.keras is Keras 3."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "workers"))
import harness  # noqa: E402

WORKERS = Path(__file__).resolve().parent / "tf_keras_workers"
pytestmark = pytest.mark.timeout(400)


@pytest.mark.parametrize("keras", ["tf.keras", "tf_keras"])
def test_tf_keras(make_cluster, tmp_path, keras):
    pytest.importorskip("tf_keras")
    env = {"TFPS_TEST_KERAS": keras, "TFPS_TEST_OUT": str(tmp_path), "TFPS_TIMEOUT": "120"}
    if keras == "tf.keras":
        env["TF_USE_LEGACY_KERAS"] = "1"
    cluster = make_cluster(2, 1, timeout=300, env=env)
    worker = "tf_keras_worker.py" if keras == "tf.keras" else "tf_keras_direct_worker.py"
    harness.run_and_check(cluster, WORKERS / worker)

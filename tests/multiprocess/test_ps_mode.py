"""PS mode (server-side optimizers) on every path: Keras 3 PS optimizers, the graph rewrite
for tf.compat.v1 and tf_keras legacy optimizers, rewrite_graph_def, and Keras fit."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "workers"))
import harness  # noqa: E402

WORKER = Path(__file__).resolve().parent / "ps_workers" / "ps_worker.py"
pytestmark = pytest.mark.timeout(400)


@pytest.mark.parametrize("num_workers, num_servers, rewrite_flag", [(1, 1, "1"), (3, 2, "0")])
def test_ps_mode_matches_stock_optimizers(make_cluster, num_workers, num_servers, rewrite_flag):
    # Partitions of 64 bytes: every weight matrix spans both servers.
    cluster = make_cluster(num_workers, num_servers, timeout=300,
                           env={"TFPS_PARTITION_BYTES": "64", "TFPS_GRAPH_REWRITE": rewrite_flag})
    harness.run_and_check(cluster, WORKER)

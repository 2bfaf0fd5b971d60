"""Trains STEPS allreduces of one 1000-float tensor and reports what every role's metrics
port said before and after (the port rule of tfps-run --metrics-port: scheduler BASE,
server i BASE+1+i, worker r BASE+1+servers+r). Writes OUT_DIR/rank-R.json."""

import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workers"))
from harness import pin_threads  # noqa: E402

pin_threads()
import tf_ps_ops as hvd  # noqa: E402
from tf_ps_ops.common.metrics_text import parse, scrape  # noqa: E402

STEPS = 6
ELEMENTS = 1000


def scrape_all(ports):
    return {role: parse(scrape("127.0.0.1", port)) for role, port in ports.items()}


def main():
    hvd.init()
    rank, num_servers = hvd.rank(), hvd.num_servers()
    own = int(os.environ["TFPS_METRICS_PORT"])
    base = own - 1 - num_servers - rank
    ports = {"scheduler": base, "server": base + 1, "worker": own}
    before = scrape_all(ports)
    x = tf.fill([ELEMENTS], float(rank + 1))
    for _ in range(STEPS):
        y = hvd.allreduce(x, op=hvd.Sum, name="metrics.g")
        np.testing.assert_allclose(y.numpy(), sum(range(1, hvd.size() + 1)))
    after = scrape_all(ports)
    in_process = hvd.metrics()
    text = scrape("127.0.0.1", own)
    # Train on a while for the launcher's status line (the same number of calls on every
    # worker; its numbers are not checked, only its shape).
    for _ in range(120):
        hvd.allreduce(x, op=hvd.Sum, name="metrics.status")
        time.sleep(0.025)
    with open(os.path.join(os.environ["OUT_DIR"], f"rank-{rank}.json"), "w") as f:
        json.dump({"before": before, "after": after, "in_process": in_process,
                   "text": text, "port": hvd.metrics_port(), "own": own}, f)
    hvd.shutdown()


if __name__ == "__main__":
    main()

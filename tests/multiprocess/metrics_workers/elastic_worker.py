"""An elastic job's worker for test_metrics_elastic.py, under `tfps-run --elastic
--elastic-restarts 1 --metrics-port BASE`:

    elastic_worker.py OUT_DIR KILL_ID KILL_STEP MIN_STEPS

Averages a gradient by hvd.allreduce inside hvd.elastic.run, committing every step; worker
KILL_ID SIGKILLs itself at the start of step KILL_STEP. The loop ends once MIN_STEPS are
done, some step ran on one worker (after the kill) and the last on two (the replacement
joined). Each worker then scrapes its own metrics port (TFPS_METRICS_PORT) and those of its
epoch's scheduler and servers (epoch.json's "metrics") and writes OUT_DIR/<id>.json with
the texts, the ports and its history of step sizes.
"""

import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workers"))
from harness import pin_threads  # noqa: E402

pin_threads()
import tensorflow as tf  # noqa: E402

import tf_ps_ops as hvd  # noqa: E402
from tf_ps_ops.common.elastic_epoch import read_epoch  # noqa: E402
from tf_ps_ops.common.metrics_text import scrape  # noqa: E402

MAX_STEPS = 2000  # a bound, so that a broken join cannot loop for ever


def main():
    out_dir, kill_id, kill_step, min_steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
        int(sys.argv[4])
    me = os.environ["TFPS_ELASTIC_ID"]
    hvd.init()
    w = tf.Variable(tf.zeros([4], tf.float64))
    state = hvd.elastic.TensorFlowState([w], step=0, sizes=())

    def done():
        return state.step >= min_steps and 1 in state.sizes and state.sizes[-1] == 2

    @hvd.elastic.run
    def train(state):
        while not done():
            if state.step >= MAX_STEPS:
                raise RuntimeError(f"no step of 2 workers after one of 1 by step {MAX_STEPS}")
            if me == kill_id and state.step == kill_step:
                os.kill(os.getpid(), signal.SIGKILL)
            g = hvd.allreduce(tf.fill([4], tf.constant(state.step + 1.0, tf.float64)),
                              name="grad")
            w.assign_sub(0.1 * g)
            state.sizes = state.sizes + (hvd.size(),)
            state.step += 1
            state.commit()
            time.sleep(0.05)  # the launcher's status line scrapes meanwhile

    train(state)
    own = int(os.environ["TFPS_METRICS_PORT"])
    ports = read_epoch()["metrics"]
    report = {"own": own, "reported": hvd.metrics_port(), "control": ports,
              "sizes": state.sizes, "w": w.numpy().tolist(), "worker": scrape("127.0.0.1", own),
              "scheduler": scrape("127.0.0.1", ports["scheduler"]),
              "servers": [scrape("127.0.0.1", p) for p in ports["servers"]]}
    with open(os.path.join(out_dir, f"{me}.json"), "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()

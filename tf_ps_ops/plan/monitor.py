"""PlanMonitor: a Keras callback that re-measures while training — the step time and the
bytes this worker sends per step (to the servers and to its peers), the send rate they
achieve — and logs them beside the plan's prediction, on rank 0, every `every` steps.

    model.fit(..., callbacks=[tf_ps_ops.plan.monitor.PlanMonitor(plan, every=100)])

It changes nothing: the engine's partition size, fusion and credit are fixed once it
runs, and a per-layer change must be the same on every worker at the same step. When the
measured step strays from the prediction by more than `tolerance`, the log says so, with
what to do (measure again and re-plan at the next start).
"""

import time

import keras
import numpy as np

from tf_ps_ops.plan import auto


def _counters():
    from tf_ps_ops.common import library

    api = library.c_api()
    return int(api.tfps_bytes_sent()), int(api.tfps_peer_bytes_sent())


class PlanMonitor(keras.callbacks.Callback):
    def __init__(self, plan=None, every=100, tolerance=0.15):
        super().__init__()
        if every < 2:
            raise ValueError(f"PlanMonitor(every={every}): needs at least 2 steps a window")
        self.plan, self.every, self.tolerance = plan, every, tolerance
        self.reports = []  # one dict per window: step_s, server_bytes, peer_bytes, send_gbps
        self._stamps, self._start = [], None

    def on_train_batch_begin(self, batch, logs=None):
        if not self._stamps:
            self._start = _counters()
        self._stamps.append(time.perf_counter())

    def on_train_batch_end(self, batch, logs=None):
        if len(self._stamps) < self.every:
            return
        steps = len(self._stamps)  # batches begun and ended in this window
        sent, peer = (now - then for now, then in zip(_counters(), self._start))
        now = time.perf_counter()
        step = float(np.median(np.diff(self._stamps + [now])))
        elapsed = now - self._stamps[0]
        report = {"step_s": step, "server_bytes": sent / steps, "peer_bytes": peer / steps,
                  "send_gbps": (sent + peer) * 8e-9 / elapsed if elapsed > 0 else 0.0}
        self.reports.append(report)
        self._stamps = []
        auto.log_once(self._describe(report))

    def _describe(self, r):
        text = (f"plan monitor: step {r['step_s'] * 1e3:.2f} ms, sent per step "
                f"{r['server_bytes']:.0f} B to servers + {r['peer_bytes']:.0f} B to peers, "
                f"{r['send_gbps']:.3g} Gbit/s")
        if self.plan is None:
            return text
        predicted = self.plan.step_time
        text += f" (predicted step {predicted * 1e3:.2f} ms)"
        if predicted > 0 and abs(r["step_s"] / predicted - 1) > self.tolerance:
            text += (f"; off by more than {self.tolerance:.0%}: measure again "
                     f"(tf_ps_ops.plan.measure.measure_cluster(refresh=True)) and re-plan "
                     f"at the next start")
        return text

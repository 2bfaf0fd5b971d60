"""AutoTune: while training, try the send queue's fusion threshold and scheduling credit
within a bounded search and keep the fastest, as Horovod's autotune tunes its fusion
threshold and cycle time.

    model.fit(..., callbacks=[tf_ps_ops.plan.autotune.AutoTune()])

or, with no change to a Horovod script, `TFPS_AUTOTUNE=1` (`tfps-run --autotune`, as
`horovodrun --autotune`): the script's `BroadcastGlobalVariablesCallback` then runs one
(`from_environment`: TFPS_AUTOTUNE_WARMUP_STEPS, TFPS_AUTOTUNE_STEPS_PER_SAMPLE,
TFPS_AUTOTUNE_LOG).

After `warmup_steps` (tracing, the first steps' allocations) it times `steps_per_sample`
steps under each candidate: first the running settings, then each other fusion
threshold with the running credit, then each other credit with the best threshold found
(so at most 1 + (F − 1) + (C − 1) samples: 7 with the planner's 4 thresholds and 4
credits). A candidate replaces the best only when its median step is shorter by more
than `min_gain` (single samples on a shared machine differ by several percent). Then it
keeps the best and stops. Every change is logged on rank 0, and `history` holds each
sample.

Both settings decide only when this worker's partitions leave (fusion: small partitions
for one server share a message; credit: the bytes in flight before the next partition
waits), never what a server computes: training computes the same with any of them, and
workers may differ. Each worker tunes its own, on its own step times (in synchronous
training they are the same steps). The partition size is not tuned: the servers hold
each tensor's partitions, so it is fixed when a job starts (TFPS_PARTITION_BYTES, or
the plan's at the next start).
"""

import ctypes
import time

import keras
import numpy as np

from tf_ps_ops.plan import auto, planner


def _set(setter, *values):
    """Calls a tfps_set_* function of the C API with `values` and an error buffer; its
    message as a ValueError when it refuses them."""
    err = ctypes.create_string_buffer(512)
    if setter(*values, err, len(err)) != 0:
        raise ValueError(err.value.decode(errors="replace"))


def set_tuning(fusion_bytes, credit):
    """Changes this worker's fusion threshold and scheduling credit (bytes) now."""
    from tf_ps_ops.common import library

    _set(library.c_api().tfps_set_tuning, int(fusion_bytes), int(credit))


def set_cycle(cycle_us):
    """Changes how long this worker's fusion batches may wait for more small partitions
    (TFPS_CYCLE_US, microseconds) now."""
    from tf_ps_ops.common import library

    _set(library.c_api().tfps_set_cycle_us, int(cycle_us))


def cycle():
    """The cycle time (microseconds) this worker sends by now."""
    from tf_ps_ops.common import library

    value = library.c_api().tfps_cycle_us()
    if value < 0:
        raise RuntimeError("tf_ps_ops is not initialised: call tf_ps_ops.init() first")
    return int(value)


def tuning():
    """(fusion threshold, scheduling credit) in bytes that this worker sends by now."""
    from tf_ps_ops.common import library

    fusion, credit = ctypes.c_longlong(), ctypes.c_longlong()
    if library.c_api().tfps_tuning(ctypes.byref(fusion), ctypes.byref(credit)) != 0:
        raise RuntimeError("tf_ps_ops is not initialised: call tf_ps_ops.init() first")
    return int(fusion.value), int(credit.value)


class Search:
    """The bounded coordinate search, apart from any clock: `candidate` is what to time
    next (None when done), `record(step_s)` its median step."""

    def __init__(self, start, fusions=planner.FUSIONS, credits=planner.CREDITS,
                 min_gain=0.03):
        self.start, self.min_gain = tuple(start), min_gain
        # The credits to try once the fusions are done (None: under way or done).
        self._credits = [c for c in credits if c != start[1]]
        self._queue = [self.start] + [(f, start[1]) for f in fusions if f != start[0]]
        self.planned = len(self._queue) + len(self._credits)  # samples in all
        self.best, self.best_s = None, None
        self.history = []  # (fusion, credit, median step s)

    @property
    def candidate(self):
        return self._queue[0] if self._queue else None

    def record(self, step_s):
        tried = self._queue.pop(0)
        self.history.append((tried[0], tried[1], float(step_s)))
        if self.best is None or step_s < self.best_s * (1 - self.min_gain):
            self.best, self.best_s = tried, float(step_s)
        if not self._queue and self._credits is not None:
            self._queue, self._credits = [(self.best[0], c) for c in self._credits], None


def from_environment(environ=None):
    """An AutoTune as TFPS_AUTOTUNE (or HOROVOD_AUTOTUNE) asks, or None when it is unset
    or 0."""
    from tf_ps_ops.common import config

    enabled, source = config.lookup("TFPS_AUTOTUNE", environ)
    if enabled is None or enabled.lower() in ("0", "false", "no", "off", ""):
        return None
    if enabled.lower() not in ("1", "true", "yes", "on"):
        raise ValueError(f"{source}={enabled!r}: use 1 to tune the fusion threshold and the "
                         f"scheduling credit while training, 0 not to")
    return AutoTune(warmup_steps=config.lookup("TFPS_AUTOTUNE_WARMUP_STEPS", environ)[0],
                    steps_per_sample=config.lookup("TFPS_AUTOTUNE_STEPS_PER_SAMPLE",
                                                   environ)[0],
                    log_file=config.lookup("TFPS_AUTOTUNE_LOG", environ)[0])


class AutoTune(keras.callbacks.Callback):
    def __init__(self, warmup_steps=5, steps_per_sample=10, fusions=planner.FUSIONS,
                 credits=planner.CREDITS, min_gain=0.03, log_file=None):
        super().__init__()
        self.log_file = log_file
        if steps_per_sample < 2 or warmup_steps < 0:
            raise ValueError(f"AutoTune(warmup_steps={warmup_steps}, steps_per_sample="
                             f"{steps_per_sample}): needs warmup_steps >= 0 and at least 2 "
                             f"steps a sample (the first after a change is not timed)")
        self.warmup_steps, self.steps_per_sample = warmup_steps, steps_per_sample
        self._grid, self.min_gain = (tuple(fusions), tuple(credits)), min_gain
        self.search, self.done = None, False
        self._seen, self._last, self._steps, self._skip = 0, None, [], False

    @property
    def history(self):
        return [] if self.search is None else list(self.search.history)

    def on_train_batch_end(self, batch, logs=None):
        if self.done:
            return
        now = time.perf_counter()
        self._seen += 1
        last, self._last = self._last, now
        if self._seen <= self.warmup_steps:
            return
        if self.search is None:
            self.search = Search(tuning(), *self._grid, min_gain=self.min_gain)
            auto.log_once(f"autotune: timing fusion {self.search.start[0]} B and credit "
                          f"{self.search.start[1]} B (the running settings), then at most "
                          f"{self.search.planned - 1} others, "
                          f"{self.steps_per_sample} steps each")
            return
        if self._skip:  # the first step after a change may hold the previous settings'
            self._skip = False
            return
        self._steps.append(now - last)
        if len(self._steps) < self.steps_per_sample - 1:
            return
        tried, step = self.search.candidate, float(np.median(self._steps))
        self._steps = []
        self.search.record(step)
        self._write_sample(tried, step)
        auto.log_once(f"autotune: fusion {tried[0]} B, credit {tried[1]} B: median step "
                      f"{step * 1e3:.2f} ms")
        nxt = self.search.candidate
        if nxt is None:
            self.done = True
            best = self.search.best
            if best != tried:
                set_tuning(*best)
            auto.log_once(f"autotune: keeping fusion {best[0]} B, credit {best[1]} B "
                          f"(median step {self.search.best_s * 1e3:.2f} ms; the running "
                          f"settings took {self.search.history[0][2] * 1e3:.2f} ms)")
            return
        set_tuning(*nxt)
        self._skip = True
        auto.log_once(f"autotune: trying fusion {nxt[0]} B, credit {nxt[1]} B")

    def _write_sample(self, tried, step):
        from tf_ps_ops.common import basics

        if not self.log_file or (basics.is_initialized() and basics.rank() != 0):
            return
        fresh = len(self.search.history) == 1
        with open(self.log_file, "w" if fresh else "a") as f:
            if fresh:
                f.write("fusion_bytes,credit_bytes,median_step_s\n")
            f.write(f"{tried[0]},{tried[1]},{step:.6f}\n")

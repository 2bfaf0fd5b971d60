"""AutoTune: while training, try the send queue's fusion threshold, scheduling credit and
cycle time within a bounded search and keep the fastest, as Horovod's autotune tunes its
fusion threshold and cycle time.

    model.fit(..., callbacks=[tf_ps_ops.plan.autotune.AutoTune()])

or, with no change to a Horovod script, `TFPS_AUTOTUNE=1` (`tfps-run --autotune`, as
`horovodrun --autotune`): the script's `BroadcastGlobalVariablesCallback` then runs one
(`from_environment`: TFPS_AUTOTUNE_WARMUP_STEPS, TFPS_AUTOTUNE_STEPS_PER_SAMPLE,
TFPS_AUTOTUNE_LOG). There, as in Horovod, a setting the job was started with explicitly
(TFPS_FUSION_BYTES, TFPS_SCHEDULING_CREDIT, TFPS_CYCLE_US, or the launcher's flags that set
them) is fixed: the search leaves it as it is.

After `warmup_steps` (tracing, the first steps' allocations) it times `steps_per_sample`
steps under each candidate: first the running settings, then each other fusion
threshold with the running credit and cycle, then each other credit with the best
threshold found, then each other cycle time with the best of both. The cycle times are
skipped when the best threshold is 0: with no fusion batches there is nothing for a cycle
to hold back. A candidate replaces the best only when its median step is shorter by more
than `min_gain` (single samples on a shared machine differ by several percent). Where the
best is not the running settings, both are timed once more, one after the other, and the
best stays only if it still wins by `min_gain` (the first sample ran right after the
warm-up, and the best is the fastest of several noisy samples). So at most
1 + (F − 1) + (C − 1) + (Y − 1) + 2 samples: 11 with the planner's 4 thresholds and 4
credits and 3 cycle times. Then it keeps the best and stops. Every change is
logged on rank 0, and `history` holds each sample.

All three settings decide only when this worker's partitions leave (fusion: small
partitions for one server share a message; credit: the bytes in flight before the next
partition waits; cycle: how long a batch waits for more partitions), never what a server
computes: training computes the same with any of them, and workers may differ. Each
worker tunes its own, on its own step times (in synchronous training they are the same
steps). The partition size is not tuned: the servers hold each tensor's partitions, so it
is fixed when a job starts (TFPS_PARTITION_BYTES, or the plan's at the next start).
"""

import ctypes
import os
import time

import keras
import numpy as np

from tf_ps_ops.plan import auto, planner

# The cycle times (µs) the search tries: none, and the two that shortened summation's step
# on the DLRM-like model and MobileNetV2 (docs/plan.md).
CYCLES = (0, 300, 1000)
KNOBS = ("fusion", "credit", "cycle")


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
    next, a (fusion bytes, credit bytes, cycle µs) (None when done); `record(step_s)` its
    median step."""

    def __init__(self, start, fusions=planner.FUSIONS, credits=planner.CREDITS,
                 cycles=CYCLES, min_gain=0.03):
        if len(start) != len(KNOBS):
            raise ValueError(f"Search(start={start!r}): give (fusion bytes, credit bytes, "
                             f"cycle us)")
        self.start, self.min_gain = tuple(int(v) for v in start), min_gain
        # Along each knob in turn, the values other than the running one.
        self._others = [[v for v in grid if v != self.start[axis]]
                        for axis, grid in enumerate((fusions, credits, cycles))]
        self._axis = 0
        self._queue = [self.start] + self._along(0, self.start)
        # + the running settings and the best timed again (record)
        self.planned = 1 + sum(len(o) for o in self._others) + 2  # samples at most
        self.best, self.best_s = None, None
        self.history = []  # (fusion, credit, cycle, median step s)
        self.final = None  # [the running settings' step, the best's] when timed again

    def _along(self, axis, base):
        return [base[:axis] + (v,) + base[axis + 1:] for v in self._others[axis]]

    @property
    def candidate(self):
        return self._queue[0] if self._queue else None

    def record(self, step_s):
        tried = self._queue.pop(0)
        self.history.append((*tried, float(step_s)))
        if self.final is not None:
            self.final.append(float(step_s))
            if len(self.final) == 2:
                start_s, best_s = self.final
                if best_s < start_s * (1 - self.min_gain):
                    self.best_s = best_s
                else:
                    self.best, self.best_s = self.start, start_s
            return
        if self.best is None or step_s < self.best_s * (1 - self.min_gain):
            self.best, self.best_s = tried, float(step_s)
        while not self._queue and self._axis + 1 < len(KNOBS):
            self._axis += 1
            if KNOBS[self._axis] == "cycle" and self.best[0] == 0:
                continue  # no fusion batches: a cycle has nothing to hold back
            self._queue = self._along(self._axis, self.best)
        if not self._queue and self.best != self.start:
            # The running settings and the best once more, one after the other: the first
            # sample ran right after the warm-up, and the best is the fastest of several
            # noisy samples. The best stays only if it still wins by min_gain.
            self.final = []
            self._queue = [self.start, self.best]


def describe(settings):
    """(fusion, credit, cycle) as the log says it."""
    fusion, credit, cycle_us = settings[:3]
    return f"fusion {fusion} B, credit {credit} B, cycle {cycle_us} us"


def apply(settings):
    """Makes this worker send by (fusion bytes, credit bytes, cycle µs) now."""
    set_tuning(settings[0], settings[1])
    set_cycle(settings[2])


def from_environment(environ=None):
    """An AutoTune as TFPS_AUTOTUNE (or HOROVOD_AUTOTUNE) asks, or None when it is unset
    or 0."""
    from tf_ps_ops.common import config

    environ = os.environ if environ is None else environ
    enabled, source = config.lookup("TFPS_AUTOTUNE", environ)
    if enabled is None or enabled.lower() in ("0", "false", "no", "off", ""):
        return None
    if enabled.lower() not in ("1", "true", "yes", "on"):
        raise ValueError(f"{source}={enabled!r}: use 1 to tune the fusion threshold, the "
                         f"scheduling credit and the cycle time while training, 0 not to")

    def grid(name, default):  # what the job was started with explicitly stays fixed
        if environ.get(name, "").strip():
            return (config.engine_int(name, environ),)
        return default

    return AutoTune(warmup_steps=config.lookup("TFPS_AUTOTUNE_WARMUP_STEPS", environ)[0],
                    steps_per_sample=config.lookup("TFPS_AUTOTUNE_STEPS_PER_SAMPLE",
                                                   environ)[0],
                    fusions=grid("TFPS_FUSION_BYTES", planner.FUSIONS),
                    credits=grid("TFPS_SCHEDULING_CREDIT", planner.CREDITS),
                    cycles=grid("TFPS_CYCLE_US", CYCLES),
                    log_file=config.lookup("TFPS_AUTOTUNE_LOG", environ)[0])


class AutoTune(keras.callbacks.Callback):
    def __init__(self, warmup_steps=5, steps_per_sample=10, fusions=planner.FUSIONS,
                 credits=planner.CREDITS, cycles=CYCLES, min_gain=0.03, log_file=None):
        super().__init__()
        self.log_file = log_file
        if steps_per_sample < 2 or warmup_steps < 0:
            raise ValueError(f"AutoTune(warmup_steps={warmup_steps}, steps_per_sample="
                             f"{steps_per_sample}): needs warmup_steps >= 0 and at least 2 "
                             f"steps a sample (the first after a change is not timed)")
        self.warmup_steps, self.steps_per_sample = warmup_steps, steps_per_sample
        self._grid = (tuple(fusions), tuple(credits), tuple(cycles))
        self.min_gain = min_gain
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
            self.search = Search((*tuning(), cycle()), *self._grid, min_gain=self.min_gain)
            auto.log_once(f"autotune: timing {describe(self.search.start)} (the running "
                          f"settings), then at most {self.search.planned - 1} others, "
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
        auto.log_once(f"autotune: {describe(tried)}: median step {step * 1e3:.2f} ms")
        nxt = self.search.candidate
        if nxt is None:
            self.done = True
            best = self.search.best
            if best != tried:
                apply(best)
            final = self.search.final
            again = " timed again" if final else ""
            start_s = final[0] if final else self.search.history[0][-1]
            auto.log_once(f"autotune: keeping {describe(best)} (median step "
                          f"{self.search.best_s * 1e3:.2f} ms; the running settings{again} "
                          f"took {start_s * 1e3:.2f} ms)")
            return
        apply(nxt)
        self._skip = True
        auto.log_once(f"autotune: trying {describe(nxt)}")

    def _write_sample(self, tried, step):
        from tf_ps_ops.common import basics

        if not self.log_file or (basics.is_initialized() and basics.rank() != 0):
            return
        fresh = len(self.search.history) == 1
        with open(self.log_file, "w" if fresh else "a") as f:
            if fresh:
                f.write("fusion_bytes,credit_bytes,cycle_us,median_step_s\n")
            f.write(f"{tried[0]},{tried[1]},{tried[2]},{step:.6f}\n")

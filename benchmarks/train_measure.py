"""What a process of benchmarks/train_worker.py measures around its timed steps:
time_steps runs the warm-up and the timed steps and takes the step times and losses;
Window snapshots, at the window's start and end, /proc/stat (CPU used by the whole
machine), the CPU time of every process of the configuration (pids from --pids-file,
written by the driver) and the host's eth0 byte counters; CodecCounters takes the
engine's counters over the timed steps (tf_ps_ops modes).
"""

import json
import os
import time


def _proc_stat():
    """Machine-wide CPU seconds: {user, nice, system, idle, iowait, irq, softirq, steal}."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:9]
    hz = os.sysconf("SC_CLK_TCK")
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    return {name: int(value) / hz for name, value in zip(names, fields)}


def _pid_cpu(pid):
    """utime + stime of a process in seconds (all its threads), None if it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the name may contain spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _net_bytes():
    base = "/sys/class/net/eth0/statistics/"
    try:
        with open(base + "tx_bytes") as tx, open(base + "rx_bytes") as rx:
            return int(tx.read()), int(rx.read())
    except OSError:  # not inside an emulated host
        return 0, 0


class Window:
    """Snapshots at the start and the end of the timed steps."""

    def __init__(self, pids_file):
        self.pids_file = pids_file
        self.labels = {}

    def _load_pids(self):
        if self.labels or not self.pids_file:
            return
        for _ in range(50):  # the driver writes it right after starting every process
            try:
                with open(self.pids_file) as f:
                    self.labels = {int(pid): label for pid, label in json.load(f).items()}
                return
            except (OSError, ValueError):
                time.sleep(0.1)

    def snapshot(self):
        self._load_pids()
        tx, rx = _net_bytes()
        return dict(t=time.monotonic(), stat=_proc_stat(), tx=tx, rx=rx,
                    self_cpu=time.process_time(),
                    pids={pid: _pid_cpu(pid) for pid in self.labels})

    def summary(self, start, end):
        elapsed = end["t"] - start["t"]
        delta = {k: end["stat"][k] - start["stat"][k] for k in start["stat"]}
        busy = delta["user"] + delta["nice"] + delta["system"]
        ours = {}
        for pid, label in self.labels.items():
            a, b = start["pids"].get(pid), end["pids"].get(pid)
            if a is not None and b is not None:
                ours[label] = round(b - a, 3)
        return dict(elapsed_s=round(elapsed, 4), machine_busy_s=round(busy, 3),
                    softirq_s=round(delta["softirq"] + delta["irq"], 3),
                    ours_cpu_s=ours, ours_total_s=round(sum(ours.values()), 3),
                    other_cpu_s=round(busy - sum(ours.values()), 3),
                    self_cpu_s=round(end["self_cpu"] - start["self_cpu"], 3),
                    tx_bytes=end["tx"] - start["tx"], rx_bytes=end["rx"] - start["rx"])


def time_steps(run_one, args, window, samples_per_step):
    times, losses = [], []
    start = None
    profiling = False
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            start = window.snapshot()
            if args.tf_profile:  # TensorFlow's profiler over the first 3 timed steps
                import tensorflow as tf
                tf.profiler.experimental.start(os.path.join(args.tf_profile,
                                                            f"{args.mode}-{os.getpid()}"))
                profiling = True
        if profiling and i == args.warmup + 3:
            tf.profiler.experimental.stop()
            profiling = False
        t0 = time.perf_counter()
        losses.append(run_one())
        times.append(time.perf_counter() - t0)
    if profiling:
        tf.profiler.experimental.stop()
    end = window.snapshot()
    return dict(warmup_s=[round(t, 4) for t in times[:args.warmup]],
                step_s=[round(t, 4) for t in times[args.warmup:]],
                samples_per_step=samples_per_step, loss_first=losses[0], loss_last=losses[-1],
                window=window.summary(start, end))


class CodecCounters:
    """Wraps a step: the engine's counters (compression: docs/compression.md) over the
    timed steps, per step: payload bytes sent and received, the float32 bytes the
    compressed pushes stood for, their encoded bytes, and the engine thread's CPU time
    encoding and decoding."""

    NAMES = ("bytes_sent", "bytes_received", "codec_raw_bytes", "codec_encoded_bytes",
             "codec_micros")

    def __init__(self, step, warmup):
        from tf_ps_ops.common import library as _library
        self.c_api, self.step, self.warmup, self.calls = _library.c_api(), step, warmup, 0
        self.start = self.read()

    def read(self):
        return [getattr(self.c_api, "tfps_" + name)() for name in self.NAMES]

    def __call__(self):
        if self.calls == self.warmup:
            self.start = self.read()
        self.calls += 1
        return self.step()

    def per_step(self):
        steps = max(1, self.calls - self.warmup)
        return {name: (end - start) / steps
                for name, start, end in zip(self.NAMES, self.start, self.read())}

"""Training throughput on emulated hosts: tf_ps_ops' modes against TensorFlow's own
strategies and Horovod, side by side in one run (see benchmarks/TRAINING.md).

    python3 benchmarks/train_bench.py            # full: mlp + cnn, 1 and 10 Gbit/s (~20 min)
    python3 benchmarks/train_bench.py --quick    # smoke: tiny mlp, 1 Gbit/s, 2 steps (~2 min)
    python3 benchmarks/train_bench.py --quick --modes single,sum --models tiny_mlp

Two hosts (network namespaces on a bridge, tbf on each link; benchmarks/netns.py), one
worker per host, batch 32 per worker, 1 TF thread per process. For each link rate, model
and mode: start the processes (a tf_ps_ops cluster puts the scheduler on host 0 and a
ps_server on every host; benchmarks/ps_cluster.py), warm up, time --steps steps, report
the median. The single-process baseline runs on host 0 in the same sweep, per rate.

Every process has a deadline and its exit code is checked; a failed configuration prints
the stderr of its processes and the run goes on (the row says "failed"). CPU used by
other processes during each timed window is recorded; a window where they used more than
--other-limit cores is run again (--retries), keeping the cleanest.

Writes benchmarks/results/train_<tag>.json, .md and _throughput.png (tag: quick or full,
or --tag).
"""

import argparse
import datetime
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from netns import Hosts, available  # noqa: E402
from ps_cluster import REPO, ClusterError, NetnsCluster, netns_host  # noqa: E402
from tf_ps_ops.runner.job import Job  # noqa: E402
from tf_ps_ops.runner.process import LogFiles  # noqa: E402
import zoo_models  # noqa: E402

WORKER = HERE / "train_worker.py"
RESULTS = HERE / "results"
# int8: sum with TFPS_COMPRESSION=int8; auto: the planner's choice per layer (plan="auto"),
# uncompressed; auto_int8: the same, free to pick int8 too (TFPS_PLAN_CODECS=none,int8);
# tuned: sum with the autotuner (TFPS_AUTOTUNE=1) searching during TUNE_WARMUP extra warm-up
# steps, the timed steps under what it kept
TFPS_MODES = ("sum", "ps", "sfb", "hybrid", "int8", "auto", "auto_int8", "tuned")
TUNE_ENV = {"TFPS_AUTOTUNE": "1", "TFPS_AUTOTUNE_WARMUP_STEPS": "2",
            "TFPS_AUTOTUNE_STEPS_PER_SAMPLE": "4"}
TUNE_WARMUP = 3 + 7 * 4 + 1  # its warm-up, its first untimed step, 7 samples of 3 + 1
ALL_MODES = ("single",) + TFPS_MODES + ("mwms", "pss", "horovod")
DENSE_MODES = ("sum", "ps", "mwms", "pss", "horovod")  # move the whole gradient: t_opt applies
MODE_LABELS = {"single": "single process", "sum": "tf_ps_ops sum", "ps": "tf_ps_ops ps",
               "sfb": "tf_ps_ops sfb", "hybrid": "tf_ps_ops hybrid",
               "int8": "tf_ps_ops sum int8", "auto": "tf_ps_ops auto plan",
               "auto_int8": "tf_ps_ops auto plan, int8 allowed",
               "tuned": "tf_ps_ops sum, autotuned", "mwms": "TF MultiWorkerMirrored",
               "pss": "TF ParameterServer", "horovod": "Horovod (Gloo)"}
# Timed steps per model (--steps overrides): windows of a few seconds, so that the CPU
# accounting (10 ms ticks) and the median mean something.
STEPS = {"mlp": 12, "cnn": 40, "tiny_mlp": 2, "tiny_cnn": 2, **zoo_models.STEPS}
MIN_WINDOW_S = 0.5  # shorter windows (smoke runs) are not judged for contamination
PLOT_LABELS = {"single": "single\nprocess", "sum": "tf_ps_ops\nsum", "ps": "tf_ps_ops\nps",
               "sfb": "tf_ps_ops\nsfb", "hybrid": "tf_ps_ops\nhybrid",
               "int8": "tf_ps_ops\nsum int8", "auto": "tf_ps_ops\nauto",
               "auto_int8": "tf_ps_ops\nauto+int8", "tuned": "tf_ps_ops\nautotuned",
               "mwms": "TF\nMWMS",
               "pss": "TF\nPSS", "horovod": "Horovod\n(Gloo)"}
PARAMS_GUESS = {"mlp": 36.8e6, "cnn": 1.2e6, "tiny_mlp": 0.34e6, "tiny_cnn": 0.08e6,
                **zoo_models.PARAMS}
FOREIGN_ENV = ("TFPS_", "DMLC_", "HOROVOD_", "TF_CONFIG")
CHILD_ENV = {"CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "1", "OMP_NUM_THREADS": "1",
             "OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def applies(model, mode, model_modes=None):
    """Whether a (model, mode) pair is run: --model-modes restricts a model's modes; the
    zoo's SFB / HybComm / codec modes run only where zoo_models.EXTRA_TFPS_MODES lists
    them (Dense layers on 2-D inputs; dense gradients)."""
    if model_modes and model in model_modes and mode not in model_modes[model]:
        return False
    if model in zoo_models.MODELS and mode in ("sfb", "hybrid", "int8"):
        return mode in zoo_models.EXTRA_TFPS_MODES[model]
    return mode != "int8" or model in zoo_models.MODELS


def rate_bits(rate):
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}
    for unit, factor in units.items():
        if rate.endswith(unit):
            return float(rate[:-len(unit)]) * factor
    raise ValueError("unknown rate %r (use e.g. 1gbit, 500mbit)" % rate)


def t_opt(params, workers, rate):
    """BytePS's optimum with the servers on the worker machines (k = 0 extra machines):
    2(n-1)M / (nB), M = fp32 gradient bytes (shared/notes/ALGORITHMS.md)."""
    return 2 * (workers - 1) * params * 4 / (workers * rate_bits(rate) / 8)


# --- machine load ------------------------------------------------------------------------

def machine_busy_s():
    with open("/proc/stat") as f:
        user, nice, system = (int(v) for v in f.readline().split()[1:4])
    return (user + nice + system) / os.sysconf("SC_CLK_TCK")


def own_cpu_s():
    """CPU of this driver and every child it reaped (workers, servers, ip, tc)."""
    return sum(getattr(resource.getrusage(who), field)
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
               for field in ("ru_utime", "ru_stime"))


def other_load(seconds=2.0):
    """Cores used by other processes while we run nothing."""
    busy, ours, t = machine_busy_s(), own_cpu_s(), time.monotonic()
    time.sleep(seconds)
    return max(0.0, (machine_busy_s() - busy - (own_cpu_s() - ours))
               / (time.monotonic() - t))


def wait_for_idle(limit, patience):
    """Waits (up to `patience` s) until others use less than `limit` cores; returns the
    last measurement."""
    deadline = time.monotonic() + patience
    load = other_load()
    while load > limit and time.monotonic() < deadline:
        print("  machine busy (others use %.2f cores), waiting..." % load, flush=True)
        time.sleep(10)
        load = other_load()
    return load


# --- processes that are not a tf_ps_ops cluster --------------------------------------------
# The baselines' processes run under the same launch library as our clusters: output in
# files, a process group each, reaped with wait4, one deadline (tf_ps_ops/runner/job.py).

def child_env(**more):
    env = {k: v for k, v in os.environ.items() if not k.startswith(FOREIGN_ENV)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(CHILD_ENV)
    env.update({k: str(v) for k, v in more.items()})
    return env


HOROVOD_PATH = []  # --horovod-path: where a Horovod built for this TF lives (TRAINING.md)


def horovod_env(**more):
    env = child_env(**more)
    env["PYTHONPATH"] = os.pathsep.join(HOROVOD_PATH + [env["PYTHONPATH"]])
    return env


def parse_results(text):
    return [json.loads(line[len("TRAIN_RESULT "):]) for line in text.splitlines()
            if line.startswith("TRAIN_RESULT ")]


def write_pids(path, labelled):
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(json.dumps({str(pid): label for label, pid in labelled}))
    tmp.replace(path)


# --- one configuration ---------------------------------------------------------------------

class Config:
    def __init__(self, args, hosts, rate, model, mode, workdir, port):
        self.args, self.hosts, self.rate = args, hosts, rate
        self.model, self.mode, self.port = model, mode, port
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True)
        self.pids_file = self.workdir / "pids.json"
        self.steps = args.steps or STEPS[model]
        self.batch = args.batch or zoo_models.BATCH.get(model, 32)
        est = max(0.3, 3 * t_opt(PARAMS_GUESS[model], 2, rate))
        self.warmup = args.warmup + (TUNE_WARMUP if mode == "tuned" else 0)
        self.timeout = (args.startup_timeout + zoo_models.BUILD_S.get(model, 0)
                        + (self.warmup + self.steps) * est * 4)

    def worker_argv(self, mode=None, role=None):
        mode = mode or {"int8": "sum", "auto_int8": "auto", "tuned": "sum"}.get(self.mode,
                                                                              self.mode)
        argv = [sys.executable, WORKER, "--mode", mode, "--model", self.model,
                "--batch", self.batch, "--warmup", self.warmup, "--steps",
                self.steps, "--pids-file", self.pids_file]
        if self.args.predict and self.mode in TFPS_MODES:
            argv.append("--predict")
        return argv + (["--role", role] if role else []) + self.args.worker_arg

    def run(self):
        """[TRAIN_RESULT dicts] of the workers (rank order); raises RuntimeError with the
        output of the failed processes."""
        if self.mode in TFPS_MODES:
            return self._run_tfps()
        runner = {"single": self._run_single, "mwms": self._run_mwms, "pss": self._run_pss,
                  "horovod": self._run_horovod}[self.mode]
        job = Job(None, 0, 0, LogFiles(self.workdir), cwd=REPO)
        try:
            result_procs = runner(job)
            job.wait(result_procs, time.monotonic() + self.timeout)
            for p in job.processes:
                if p not in result_procs and p.poll() is None:
                    p.killed = True  # serves forever (PSS tasks): stopped, not failed
            job.teardown(grace_s=5.0)
            failed = [r for r in (p.result() for p in job.processes) if not (r.ok or r.killed)]
            if failed:
                raise RuntimeError("\n".join(r.describe() for r in failed))
            results = [r for p in result_procs for r in parse_results(p.result().stdout)]
            if len(results) != len(result_procs):
                raise RuntimeError("no TRAIN_RESULT line:\n" + "\n".join(
                    p.result().describe() for p in result_procs))
            return results
        finally:
            job.teardown(grace_s=1.0)

    def _spawn(self, job, host, role, index, argv, env):
        return job.spawn(role, index, argv, env, netns_host(self.hosts, host))

    def _write_pids(self, job):
        write_pids(self.pids_file, [("%s%d" % (p.role, p.index), p.pid) for p in job.processes])

    def _run_single(self, job):
        p = self._spawn(job, 0, "worker", 0, self.worker_argv(), child_env())
        self._write_pids(job)
        return [p]

    def _tf_config(self, cluster, task_type, index):
        return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})

    def _run_mwms(self, job):
        cluster = {"worker": ["%s:%d" % (self.hosts.address(i), self.port)
                              for i in range(self.args.workers)]}
        workers = [self._spawn(job, i, "worker", i, self.worker_argv(),
                               child_env(TF_CONFIG=self._tf_config(cluster, "worker", i)))
                   for i in range(self.args.workers)]
        self._write_pids(job)
        return workers

    def _run_pss(self, job):
        n = self.args.workers
        cluster = {"chief": ["%s:%d" % (self.hosts.address(0), self.port)],
                   "worker": ["%s:%d" % (self.hosts.address(i), self.port + 1)
                              for i in range(n)],
                   "ps": ["%s:%d" % (self.hosts.address(i), self.port + 2) for i in range(n)]}
        for task in ("ps", "worker"):
            for i in range(n):
                self._spawn(job, i, task, i, self.worker_argv(role=task),
                            child_env(TF_CONFIG=self._tf_config(cluster, task, i)))
        chief = self._spawn(job, 0, "chief", 0, self.worker_argv(role="chief"),
                            child_env(TF_CONFIG=self._tf_config(cluster, "chief", 0)))
        self._write_pids(job)
        return [chief]

    def _run_horovod(self, job):
        n = self.args.workers
        rendezvous = self._spawn(job, 0, "rendezvous", 0, [
            sys.executable, HERE / "train_worker_horovod.py", "--rendezvous", "--port",
            self.port, "--hosts", ",".join(self.hosts.address(i) for i in range(n))],
            horovod_env())
        deadline = time.monotonic() + 60  # the workers' first request must find it up
        while "RENDEZVOUS_READY" not in rendezvous.result().stdout:
            if rendezvous.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("Horovod's rendezvous did not start:\n"
                                   + rendezvous.result().describe())
            time.sleep(0.05)
        workers = []
        for i in range(n):
            env = horovod_env(
                HOROVOD_GLOO_RENDEZVOUS_ADDR=self.hosts.address(0),
                HOROVOD_GLOO_RENDEZVOUS_PORT=self.port, HOROVOD_CONTROLLER="gloo",
                HOROVOD_CPU_OPERATIONS="gloo", HOROVOD_GLOO_IFACE="eth0",
                HOROVOD_HOSTNAME=self.hosts.address(i), HOROVOD_RANK=i, HOROVOD_SIZE=n,
                HOROVOD_LOCAL_RANK=0, HOROVOD_LOCAL_SIZE=1, HOROVOD_CROSS_RANK=i,
                HOROVOD_CROSS_SIZE=n)
            # Horovod 0.28.1 builds its process-set Gloo contexts with an empty interface
            # (gloo_context.cc, InitializeForProcessSet ignores HOROVOD_GLOO_IFACE), so gloo
            # binds to what the host name resolves to: 127.0.0.1 here, and the peers get
            # "connection refused". A UTS namespace whose host name is the eth0 address
            # makes it resolve right, with no change to Horovod.
            argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"',
                    self.hosts.address(i), *self.worker_argv()]
            workers.append(self._spawn(job, i, "worker", i, argv, env))
        self._write_pids(job)
        return workers

    def _run_tfps(self):
        env = dict(CHILD_ENV)
        env.update(self.args.tfps_env)
        if self.mode == "int8":
            env["TFPS_COMPRESSION"] = "int8"
        if self.mode == "auto_int8":
            env["TFPS_PLAN_CODECS"] = "none,int8"
        if self.mode == "tuned":
            env.update(TUNE_ENV)
        if self.args.timeline:
            Path(self.args.timeline).mkdir(parents=True, exist_ok=True)
            env["TFPS_TIMELINE"] = str(Path(self.args.timeline).resolve() / (
                "%s-%s-%s-%%r.json" % (self.model, self.rate, self.mode)))
        cluster = NetnsCluster(self.hosts, self.workdir, timeout=self.timeout, env=env)
        try:
            cluster.start(lambda rank: self.worker_argv())
            write_pids(self.pids_file, [("%s%d" % (p.role, p.index), p.pid)
                                        for p in cluster.processes()])
            cluster.wait()
            try:
                cluster.check()
            except ClusterError as e:
                raise RuntimeError(str(e)) from None
            results = [r for rank in range(self.hosts.n)
                       for r in parse_results(cluster.result("worker", rank).stdout)]
            if len(results) != self.hosts.n:
                raise RuntimeError("a worker printed no TRAIN_RESULT line (logs in %s)"
                                   % self.workdir)
            return results
        finally:
            cluster.close()


# --- the sweep -----------------------------------------------------------------------------

def horovod_status():
    """(True, version) if horovod.tensorflow imports with its TF ops, else (False, why)."""
    code = ("import horovod, horovod.tensorflow as h; h.init; "
            "from horovod.tensorflow import mpi_ops; print(horovod.__version__)")
    try:
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                timeout=120, env=horovod_env())
    except subprocess.TimeoutExpired:
        return False, "importing horovod.tensorflow timed out"
    if result.returncode != 0:
        lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
        return False, lines[-1] if lines else "exit code %d" % result.returncode
    return True, result.stdout.strip()


def _mean_cpu(by_process, prefixes):
    """Mean CPU seconds of the processes whose label starts with one of `prefixes`
    (worker0, server1, ps0, ...); 0 when there is none."""
    values = [v for label, v in by_process.items()
              if label.rstrip("0123456789") in prefixes]
    return sum(values) / len(values) if values else 0.0


def summarize(results):
    """One row from the workers' TRAIN_RESULT dicts (rank 0's window)."""
    first = min(results, key=lambda r: r["rank"])
    steps = max((r["step_s"] for r in results), key=statistics.median)
    slowest = statistics.median(steps)
    window = first["window"]
    elapsed = window["elapsed_s"] or 1e-9
    return dict(step_s=slowest, window_s=elapsed, step_min_s=min(steps), step_max_s=max(steps),
                steps=len(steps), samples_s=first["samples_per_step"] / slowest,
                warmup_s=first["warmup_s"], params=first["params"],
                other_cores=max(0.0, window["other_cpu_s"]) / elapsed,
                cpu_per_step=window["ours_total_s"] / len(steps),
                worker_cpu_per_step=_mean_cpu(window["ours_cpu_s"], ("worker",)) / len(steps),
                server_cpu_per_step=_mean_cpu(window["ours_cpu_s"], ("server", "ps")) / len(
                    steps),
                cpu_by_process=window["ours_cpu_s"],
                softirq_cores=window["softirq_s"] / elapsed,
                tx_mb_per_step=window["tx_bytes"] / len(steps) / 1e6,
                batch=first.get("batch"), loss_first=first["loss_first"],
                loss_last=first["loss_last"],
                sfb_kernels=first.get("sfb_kernels"), plan_inputs=first.get("plan_inputs"),
                autotune=first.get("autotune"))


def clean(row, args):
    return not row["judged"] or row["other_cores"] <= args.other_limit


def run_one(args, hosts, rate, model, mode, workdir, port):
    """Runs a configuration, again while others load the machine; the cleanest row."""
    best = None
    for attempt in range(1 + args.retries):
        idle = wait_for_idle(args.other_limit, args.idle_patience) if args.idle_patience \
            else None
        config = Config(args, hosts, rate, model, mode,
                        Path(workdir) / ("%s-%s-%s-%d" % (rate, model, mode, attempt)),
                        port + 10 * attempt)
        busy0, ours0, t0 = machine_busy_s(), own_cpu_s(), time.monotonic()
        try:
            row = summarize(config.run())
            row["status"] = "ok"
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            print("  FAILED %s %s %s:\n%s" % (rate, model, mode, e), flush=True)
            return dict(status="failed", error=str(e)[-3000:], attempt=attempt)
        wall = time.monotonic() - t0
        row.update(attempt=attempt, wall_s=round(wall, 1), idle_before=idle,
                   other_cores_run=max(0.0, machine_busy_s() - busy0 - (own_cpu_s() - ours0))
                   / wall)
        row["judged"] = row["window_s"] >= MIN_WINDOW_S
        if not row["judged"]:
            row["other_cores"] = 0.0 if row["other_cores"] is None else row["other_cores"]
        if best is None or row["other_cores"] < best["other_cores"]:
            best = row
        print("  %-8s %-6s %-8s step %.3f s  %7.1f samples/s  cpu %.2f s/step  "
              "others %.2f cores%s" % (rate, model, mode, row["step_s"], row["samples_s"],
                                       row["cpu_per_step"], row["other_cores"],
                                       "" if clean(row, args) else "  (contaminated)"),
              flush=True)
        if clean(row, args):
            break
    if not clean(best, args):
        best["status"] = "contaminated"
    return best


def combine(key, found, workers):
    """One row per configuration: the repeat with the median step time, and every
    repeat's step time."""
    rate, model, mode = key
    row = dict(rate=rate, model=model, mode=mode, workers=1 if mode == "single" else workers)
    done = sorted((r for r in found if r["status"] != "failed" and "step_s" in r),
                  key=lambda r: r["step_s"])
    if not done:
        row.update(found[-1])
        return row
    row.update(done[(len(done) - 1) // 2])
    # Every repeat in order, None where it failed, so that repeat k of two configurations
    # ran close in time (paired comparisons: benchmarks/zoo.py's plan ÷ best).
    row["repeat_step_s"] = [round(r["step_s"], 4) if "step_s" in r else None for r in found]
    row["repeat_started_s"] = [r.get("started_s") for r in found]
    row["repeats_failed"] = sum(r["status"] == "failed" for r in found)
    return row


def derive(rows, workers):
    """Scaling efficiency and the t_opt columns, against the same sweep's single run."""
    single = {(r["rate"], r["model"]): r for r in rows
              if r["mode"] == "single" and r["status"] != "failed"}
    for r in rows:
        if r["status"] in ("failed", "unavailable") or r["mode"] == "single":
            continue
        base = single.get((r["rate"], r["model"]))
        r["t_opt_s"] = t_opt(r["params"], workers, r["rate"])
        r["link_util"] = r["tx_mb_per_step"] * 8e6 / (rate_bits(r["rate"]) * r["step_s"])
        if base and r.get("plan_inputs") and r["plan_inputs"].get("choices"):
            r["predicted_s"] = predict_step(r["plan_inputs"], base["step_s"], r["batch"],
                                            base.get("cpu_per_step"))
            r["predicted_error"] = r["predicted_s"] / r["step_s"] - 1
        if base:
            r["scaling"] = r["samples_s"] / (workers * base["samples_s"])
            r["speedup"] = r["samples_s"] / base["samples_s"]
            r["comm_s"] = r["step_s"] - base["step_s"]
            if r["mode"] in DENSE_MODES and r["comm_s"] > 0:
                r["t_opt_over_comm"] = r["t_opt_s"] / r["comm_s"]
    return rows


def predict_step(inputs, single_step_s, batch, single_cpu_s=None):
    """The cost model's step time for a row (train_worker --predict): its measured cluster,
    machine and engine settings, its mode's choice per layer, and the compute rate at which
    the model's multiply-adds, plus the optimizer update, take the same sweep's
    single-process step (and the cores that step kept busy: its CPU-seconds over its
    seconds, for the host's CPU floor). The same code as plan="auto" and tfps-plan
    (tf_ps_ops.plan.cost)."""
    import dataclasses

    from tf_ps_ops.plan import cost, layers

    lay = layers.from_json(inputs["layers"])
    choices = [cost.parse_choice(c) for c in inputs["choices"]]
    machine = dict(inputs["machine"])
    machine["codec_per_byte"] = tuple((name, tuple(v)) for name, v in machine["codec_per_byte"])
    machine = cost.Machine(**machine)
    forward, backward = cost.compute_times(lay, dataclasses.replace(machine, macs_per_s=1.0),
                                           batch)
    apply_s = machine.apply_per_byte * sum(cost.apply_bytes(layer, cost.default_choice(layer))
                                           for layer in lay)
    rate = (sum(forward) + sum(backward)) / max(single_step_s - apply_s, 1e-3 * single_step_s)
    if single_cpu_s:
        machine = dataclasses.replace(machine, compute_cpu=single_cpu_s / single_step_s)
    settings = cost.Settings(**inputs["settings"])
    return cost.step_time(lay, choices, cost.Cluster(**inputs["cluster"]),
                          dataclasses.replace(machine, macs_per_s=rate), batch, settings)[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: tiny mlp, 1gbit, 1 warm-up + 2 timed steps")
    parser.add_argument("--rates", default=None, help="default 1gbit,10gbit (quick: 1gbit)")
    parser.add_argument("--models", default=None, help="default mlp,cnn (quick: tiny_mlp)")
    parser.add_argument("--modes", default=",".join(ALL_MODES))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=None,
                        help="per worker; default 32, zoo models their own (zoo_models.py)")
    parser.add_argument("--warmup", type=int, default=None, help="default 3 (quick: 1)")
    parser.add_argument("--steps", type=int, default=None,
                        help="timed steps; default mlp 12, cnn 40 (quick: 2)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="runs of every configuration, interleaved; the median is "
                             "reported (default 3, quick 1)")
    parser.add_argument("--order", choices=("shuffled", "fixed"), default="shuffled",
                        help="the modes' order within each repeat: shuffled per repeat "
                             "(default) or as --modes lists them")
    parser.add_argument("--seed", default="0", help="the shuffle's seed")
    parser.add_argument("--retries", type=int, default=None,
                        help="reruns of a configuration others disturbed (default 2, quick 0)")
    parser.add_argument("--other-limit", type=float, default=0.15,
                        help="cores other processes may use during a timed window")
    parser.add_argument("--idle-patience", type=float, default=None,
                        help="seconds to wait for an idle machine before each "
                             "configuration (default 120, quick 0: no wait)")
    parser.add_argument("--startup-timeout", type=float, default=120,
                        help="seconds allowed for starting the processes of a configuration")
    parser.add_argument("--timeline", default=None,
                        help="folder for TFPS_TIMELINE Chrome traces of the tf_ps_ops modes")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="environment of the tf_ps_ops processes (repeatable), e.g. "
                             "--env TFPS_SCHEDULING_CREDIT=4194304")
    parser.add_argument("--predict", action="store_true",
                        help="tf_ps_ops modes: the workers measure the cost model's inputs "
                             "before training; the table gains the predicted step "
                             "(predict_step) and its error against the measured one")
    parser.add_argument("--tag", default=None, help="results file tag (default quick/full)")
    parser.add_argument("--worker-arg", action="append", default=[],
                        help="extra argument for train_worker.py (repeatable), e.g. "
                             "--worker-arg=--pss-placement=roundrobin")
    parser.add_argument("--results-dir", default=str(RESULTS),
                        help="where train_<tag>.json/.md/_throughput.png go")
    parser.add_argument("--keep-logs", action="store_true")
    parser.add_argument("--report", metavar="JSON", default=None,
                        help="only rewrite the .md and .png of an earlier run's JSON")
    parser.add_argument("--repredict", action="store_true",
                        help="with --report: predict every row again with the current cost "
                             "model, from the inputs the run measured (and rewrite the JSON)")
    parser.add_argument("--horovod-path", default=os.environ.get("TRAIN_BENCH_HOROVOD_PATH"),
                        help="folder with a Horovod built for this TensorFlow (prepended to "
                             "PYTHONPATH of the Horovod processes; default "
                             "$TRAIN_BENCH_HOROVOD_PATH, else the installed one)")
    parser.add_argument("--model-modes", default=None, metavar="MODEL=MODE+MODE;...",
                        help="restrict some models to these modes, e.g. "
                             "'bert=single+sum+mwms;dlrm=single+sum+ps+mwms+pss'")
    args = parser.parse_args()
    args.model_modes = {name: modes.split("+") for name, modes in (
        item.split("=", 1) for item in args.model_modes.split(";"))} \
        if args.model_modes else None
    try:
        args.tfps_env = dict(item.split("=", 1) for item in args.env)
    except ValueError:
        parser.error("--env takes NAME=VALUE")
    q = args.quick
    args.rates = (args.rates or ("1gbit" if q else "1gbit,10gbit")).split(",")
    args.models = (args.models or ("tiny_mlp" if q else "mlp,cnn")).split(",")
    args.modes = args.modes.split(",")
    if q and args.steps is None:
        args.steps = 2
    for name, quick, full in (("warmup", 1, 3), ("retries", 0, 2), ("repeats", 1, 3),
                              ("idle_patience", 0, 120)):
        if getattr(args, name) is None:
            setattr(args, name, quick if q else full)
    if args.report:
        saved = json.loads(Path(args.report).read_text())
        if args.repredict:
            derive(saved["rows"], saved["meta"]["workers"])
        paths = write_report(Path(args.report).parent, saved["meta"]["tag"], saved["meta"],
                             saved["rows"])
        print("rewrote", ", ".join(str(p) for p in paths[1:]))
        return 0
    args.tag = args.tag or ("quick" if q else "full")
    unknown = set(args.modes) - set(ALL_MODES)
    if unknown:
        parser.error("unknown modes %s (choose from %s)" % (sorted(unknown), ALL_MODES))
    if args.horovod_path:
        HOROVOD_PATH.append(str(Path(args.horovod_path).resolve()))
    ok, why = available()
    if not ok:
        sys.exit("train_bench needs network namespaces: " + why)
    return sweep(args)


def mode_order(args, repeat):
    """The modes in the order repeat `repeat` runs them: --modes' order with --order fixed,
    else a shuffle seeded by --seed and the repeat (the same for every model and link, and
    again the same when the sweep is rerun)."""
    modes = list(args.modes)
    if args.order == "shuffled":
        random.Random("%s/%d" % (args.seed, repeat)).shuffle(modes)
    return modes


def sweep(args):
    started, t_start = datetime.datetime.now().astimezone(), time.monotonic()
    load_before = os.getloadavg()
    hvd_ok, hvd_info = horovod_status() if "horovod" in args.modes else (False, "not run")
    steps = args.steps or {m: STEPS[m] for m in args.models}
    batch = {m: args.batch or zoo_models.BATCH.get(m, 32) for m in args.models}
    batch = batch[args.models[0]] if len(set(batch.values())) == 1 else batch
    print("train_bench %s: rates %s, models %s, modes %s, %d workers, batch %s, %d warm-up "
          "steps, timed steps %s" % (args.tag, args.rates, args.models, args.modes,
                                     args.workers, batch, args.warmup, steps), flush=True)
    if "horovod" in args.modes:
        print("horovod: %s" % (hvd_info if hvd_ok else "unavailable (%s)" % hvd_info))
    workdir = Path(tempfile.mkdtemp(prefix="train_bench-"))
    runs, port = {}, 21000  # (rate, model, mode) -> [row of each repeat]
    try:
        for rate in args.rates:
            with Hosts(args.workers, rate=rate) as hosts:
                # Repeats interleave (every mode once, then again), so that a slow drift of
                # the machine hits every mode alike; each repeat runs the modes in its own
                # shuffled order, so that no mode always runs beside the same neighbour.
                for repeat in range(args.repeats):
                    for model in args.models:
                        for mode in mode_order(args, repeat):
                            if not applies(model, mode, args.model_modes):
                                continue
                            key = (rate, model, mode)
                            if mode == "horovod" and not hvd_ok:
                                runs[key] = [dict(status="unavailable", error=hvd_info)]
                                continue
                            started_s = time.monotonic() - t_start
                            runs.setdefault(key, []).append(run_one(
                                args, hosts, rate, model, mode,
                                workdir / ("r%d" % repeat), port))
                            runs[key][-1]["started_s"] = round(started_s, 1)
                            port += 100
    finally:
        if not args.keep_logs:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print("logs kept in", workdir)
    rows = [combine(key, found, args.workers) for key, found in runs.items()]
    derive(rows, args.workers)
    meta = dict(repeats=args.repeats, order=args.order, seed=args.seed, tag=args.tag, started=started.isoformat(timespec="seconds"),
                duration_s=round(time.monotonic() - t_start, 1),
                command="python3 benchmarks/train_bench.py " + " ".join(sys.argv[1:]),
                machine=dict(cpus=os.cpu_count(), platform=platform.platform(),
                             python=platform.python_version()),
                loadavg_before=load_before, loadavg_after=os.getloadavg(),
                workers=args.workers, batch=batch, warmup=args.warmup, steps=steps,
                other_limit=args.other_limit, horovod=hvd_info if hvd_ok else
                "unavailable: " + hvd_info, versions=versions())
    paths = write_report(Path(args.results_dir), args.tag, meta, rows)
    print(table(rows))
    print("wrote %s; the run took %.0f s" % (", ".join(str(p) for p in paths),
                                             meta["duration_s"]))
    failed = [r for r in rows if r["status"] == "failed"]
    return 1 if failed else 0


# --- report ----------------------------------------------------------------------------------

def _fmt(value, spec):
    return "—" if value is None else format(value, spec)


def table(rows):
    head = ("| model | link | mode | workers | samples/s | step s (median) | min–max | repeats | "
            "speedup | scaling eff | comm s | t_opt s | t_opt/comm | tx MB/step | link util | "
            "CPU s/step: all (worker, server) | others (cores) | predicted s (error) | status |")
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for r in rows:
        if r["status"] in ("failed", "unavailable"):
            lines.append("| %s | %s | %s | %d | | | | | | | | | | | | | | | %s |" % (
                r["model"], r["rate"], MODE_LABELS[r["mode"]], r["workers"], r["status"]))
            continue
        lines.append("| " + " | ".join([
            r["model"], r["rate"], MODE_LABELS[r["mode"]], str(r["workers"]),
            _fmt(r["samples_s"], ".1f"), _fmt(r["step_s"], ".3f"),
            "%.3f–%.3f" % (r["step_min_s"], r["step_max_s"]),
            " ".join("—" if v is None else "%.3f" % v for v in r.get("repeat_step_s", [])),
            _fmt(r.get("speedup"), ".2f") + ("×" if r.get("speedup") else ""),
            _fmt(r.get("scaling"), ".2f"), _fmt(r.get("comm_s"), ".3f"),
            _fmt(r.get("t_opt_s"), ".3f"), _fmt(r.get("t_opt_over_comm"), ".2f"),
            _fmt(r["tx_mb_per_step"], ".1f"), _fmt(r.get("link_util"), ".2f"),
            "%.2f (%.2f, %.2f)" % (r["cpu_per_step"], r["worker_cpu_per_step"],
                                   r["server_cpu_per_step"]),
            _fmt(r["other_cores"], ".2f"),
            "—" if r.get("predicted_s") is None else "%.3f (%+.0f%%)" % (
                r["predicted_s"], 100 * r["predicted_error"]),
            r["status"]]) + " |")
    return "\n".join(lines)


def plot(path, rows, meta):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in rows))
    rates = list(dict.fromkeys(r["rate"] for r in rows))
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.8), squeeze=False)
    width = 0.8 / len(rates)
    for ax, model in zip(axes[0], models):
        for j, rate in enumerate(rates):
            values = []
            for mode in modes:
                match = [r for r in rows if (r["model"], r["rate"], r["mode"]) == (
                    model, rate, mode) and r["status"] not in ("failed", "unavailable")]
                values.append(match[0]["samples_s"] if match else 0.0)
            xs = [i + (j - (len(rates) - 1) / 2) * width for i in range(len(modes))]
            bars = ax.bar(xs, values, width, label=rate)
            for bar, value, mode in zip(bars, values, modes):
                text = "%.0f" % value if value else (
                    "n/a" if mode == "horovod" else "fail")
                ax.annotate(text, (bar.get_x() + bar.get_width() / 2, value), ha="center",
                            va="bottom", fontsize=7, xytext=(0, 1), textcoords="offset points")
            single = [r for r in rows if (r["model"], r["rate"], r["mode"]) == (
                model, rate, "single") and r["status"] not in ("failed", "unavailable")]
            if single:
                ax.axhline(meta["workers"] * single[0]["samples_s"], color="C%d" % j,
                           linestyle="--", linewidth=0.8,
                           label="%d × single (%s sweep)" % (meta["workers"], rate))
        ax.set_xticks(range(len(modes)))
        ax.set_xticklabels([PLOT_LABELS[m] for m in modes], fontsize=8)
        ax.set_ylabel("samples/s (all workers)")
        batch = meta["batch"].get(model) if isinstance(meta["batch"], dict) else meta["batch"]
        ax.set_title("%s, %d workers, batch %s/worker" % (model, meta["workers"], batch))
        ax.legend(fontsize=7)
    fig.suptitle("Training throughput by mode and peer (%s)" % meta["started"][:10],
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(folder, tag, meta, rows):
    folder.mkdir(parents=True, exist_ok=True)
    base = folder / ("train_%s" % tag)
    json_path, md_path = Path(str(base) + ".json"), Path(str(base) + ".md")
    png_path = Path(str(base) + "_throughput.png")
    json_path.write_text(json.dumps(dict(meta=meta, rows=rows), indent=1) + "\n")
    lines = [
        "# Training throughput (%s)" % tag, "",
        "`%s` — started %s, took %.0f s; %d CPUs; load average before %s, after %s; "
        "TensorFlow %s, Keras %s; Horovod: %s." % (
            meta["command"], meta["started"], meta["duration_s"], meta["machine"]["cpus"],
            "/".join("%.2f" % v for v in meta["loadavg_before"]),
            "/".join("%.2f" % v for v in meta["loadavg_after"]),
            meta["versions"].get("tensorflow", "?"), meta["versions"].get("keras", "?"),
            meta["horovod"]), "",
        "%d workers (one per emulated host, tbf-limited link), batch %s per worker, "
        "%d warm-up + %s timed steps, median step of the slowest worker; each configuration "
        "ran %d times, interleaved (%s), and the run with the median step is shown (repeats: "
        "every run's step, in the order they ran). speedup and scaling "
        "eff against the single-process row of the same link sweep; comm s = step − single "
        "step; t_opt = 2(n−1)M/(nB) for the dense modes (M = fp32 gradient bytes); "
        "tx MB/step: host 0's eth0; CPU s/step: every process of the configuration, and "
        "in brackets one worker (for TF's ParameterServerStrategy a worker task; its chief "
        "counts in the total) and one server (ps_server or ps task); "
        "others: cores used by processes not ours during the timed window "
        "(limit %.2f); predicted s (--predict): the planner's cost model, from the "
        "cluster each tf_ps_ops row measured before training and the compute rate of the "
        "single-process row, and its error against the measured step." % (
            meta["workers"], meta["batch"], meta["warmup"], meta["steps"], meta["repeats"],
            "modes in a shuffled order per repeat, seed %s" % meta["seed"]
            if meta.get("order") == "shuffled" else "modes in a fixed order",
            meta["other_limit"]), "",
        table(rows), ""]
    tuned = [r for r in rows if r.get("autotune")]
    if tuned:
        lines += ["Autotuned rows (`tuned`: sum with TFPS_AUTOTUNE=1, %s steps a sample, "
                  "during %d extra warm-up steps; the timed steps run under what rank 0 kept; "
                  "fusion/credit in KiB: its median step in ms):" % (
                      TUNE_ENV["TFPS_AUTOTUNE_STEPS_PER_SAMPLE"], TUNE_WARMUP), ""]
        for r in tuned:
            t = r["autotune"]
            lines.append("- %s %s: kept fusion %d KiB, credit %d KiB; samples %s" % (
                r["model"], r["rate"], t["kept"][0] >> 10, t["kept"][1] >> 10, ", ".join(
                    "%d/%d: %.0f" % (f >> 10, c >> 10, s * 1e3) for f, c, s in t["history"])))
        lines.append("")
    errors = [r for r in rows if r.get("error")]
    if errors:
        lines += ["## Not measured", ""]
        for r in errors:
            lines.append("- %s %s %s (%s): %s" % (r["model"], r["rate"], r["mode"], r["status"],
                                                  r["error"].strip().splitlines()[-1][:300]))
        lines.append("")
    md_path.write_text("\n".join(lines))
    paths = [json_path, md_path]
    try:
        plot(png_path, rows, meta)
        paths.append(png_path)
    except ImportError as e:
        print("no plot (%s): pip install -r benchmarks/requirements.txt" % e)
    return paths


def versions():
    code = "import tensorflow as tf, keras; print(tf.__version__, keras.__version__)"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120, env=child_env()).stdout.split()
        return dict(tensorflow=out[0], keras=out[1])
    except (subprocess.SubprocessError, IndexError):
        return {}


if __name__ == "__main__":
    sys.exit(main())

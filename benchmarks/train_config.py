"""One configuration of benchmarks/train_bench.py: a (link, model, mode) run's processes
on the emulated hosts, started, waited for under one deadline and checked, and their
TRAIN_RESULT lines. The tf_ps_ops modes run as a ps_cluster.NetnsCluster; the single
process, TensorFlow's strategies and Horovod as jobs of the same launch library, each with
the environment its peers need (child_env, horovod_env).
"""

import json
import os
import sys
import time
from pathlib import Path

from ps_cluster import REPO, ClusterError, NetnsCluster, netns_host  # puts REPO on sys.path
from tf_ps_ops.runner.job import Job
from tf_ps_ops.runner.process import LogFiles
from train_modes import PARAMS_GUESS, STEPS, TFPS_MODES, t_opt, tune_env, tune_warmup
import zoo_models

HERE = Path(__file__).resolve().parent
WORKER = HERE / "train_worker.py"
FOREIGN_ENV = ("TFPS_", "DMLC_", "HOROVOD_", "TF_CONFIG")
CHILD_ENV = {"CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "1", "OMP_NUM_THREADS": "1",
             "OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


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


def parse_results(text, prefix="TRAIN_RESULT "):
    """The JSON of every line of `text` that starts with `prefix`."""
    return [json.loads(line[len(prefix):]) for line in text.splitlines()
            if line.startswith(prefix)]


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
        self.warmup = args.warmup + (tune_warmup(tune_env(args.tfps_env))
                                     if mode == "tuned" else 0)
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
            env.update(tune_env(self.args.tfps_env))
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

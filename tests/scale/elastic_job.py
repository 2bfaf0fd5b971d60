"""An elastic job of core workers (elastic_worker.py) under `tfps-run` with a host
discovery script, losing a worker and gaining one: used by test_elastic_scale.py and
benchmarks/scale_elastic.py.

The job starts on localhost:N (-np N, --min-np N-1, --max-np N, --elastic-restarts 0).
Worker w<N-1> SIGKILLs itself at step KILL_STEP: epoch 1 has N-1 workers and the slot
stays empty. Once rank 0 has run MARK steps in epoch 1, the hosts file says
localhost:N+1, one slot more than the job holds: the driver starts w<N>, which joins at
the members' next commit (epoch 2, N workers again). Every line tfps-run prints is
timestamped (time.time()) as it arrives.
"""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
from elastic_worker import COUNT  # noqa: E402
from scale_worker import summed  # noqa: E402

KILL_STEP, MARK = 3, 3


class ElasticScaleJob:
    def __init__(self, workdir, workers, step_sleep=0.05, timeout=600, env=None):
        self.dir, self.n = Path(workdir), workers
        self.hosts = self.dir / "hosts.txt"
        self.hosts.write_text(f"localhost:{workers}\n")
        script = self.dir / "discover.sh"
        script.write_text(f"#!/bin/sh\ncat '{self.hosts}'\n")
        script.chmod(0o755)
        full_env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("TFPS_", "DMLC_", "HOROVOD_"))}
        full_env.update({"PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1",
                         "OMP_NUM_THREADS": "1", "TFPS_TIMEOUT": "300",
                         "TFPS_BIND": "127.0.0.1", "TFPS_HIERARCHICAL": "0"})
        full_env.update(env or {})
        self.command = [
            sys.executable, str(REPO / "tf_ps_ops" / "run.py"), "-np", str(workers),
            "--min-np", str(workers - 1), "--max-np", str(workers), "--elastic-restarts",
            "0", "--host-discovery-script", str(script), "--timeout", str(timeout),
            sys.executable, str(HERE / "elastic_worker.py"), str(self.dir),
            str(KILL_STEP + MARK + 1), "2", "--kill", f"w{workers - 1}:{KILL_STEP}",
            "--mark", str(MARK), "--step-sleep", str(step_sleep)]
        self.env, self.timeout = full_env, timeout
        self.lines = []  # (time.time(), line)
        self.added_at = None

    def run(self):
        """Runs the job to its end; returns tfps-run's exit code."""
        self.started = time.time()
        proc = subprocess.Popen(self.command, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=self.env)
        reader = threading.Thread(target=self._read, args=(proc,), daemon=True)
        reader.start()
        mark = self.dir / "mark-1"
        give_up = time.monotonic() + self.timeout
        while not mark.exists() and proc.poll() is None and time.monotonic() < give_up:
            time.sleep(0.02)
        if mark.exists():
            self.added_at = time.time()
            self.hosts.write_text(f"localhost:{self.n + 1}\n")
        try:
            code = proc.wait(max(1.0, give_up - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        reader.join(5)
        return code

    def _read(self, proc):
        for line in proc.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    def log(self, last=80):
        return "\n".join(text for _, text in self.lines[-last:])

    def line_time(self, text):
        return next(t for t, line in self.lines if text in line)

    def results(self):
        """{id: the worker's final JSON} of the workers that finished."""
        return {p.stem: json.loads(p.read_text()) for p in self.dir.glob("w*.json")}

    def first_steps(self, epoch):
        """{id: that worker's line for `epoch` in steps-<id>.jsonl}."""
        found = {}
        for path in self.dir.glob("steps-w*.jsonl"):
            for line in path.read_text().splitlines():
                entry = json.loads(line)
                if entry["epoch"] == epoch:
                    found[path.stem[len("steps-"):]] = entry
        return found

    def check_replay(self):
        """Every finished worker holds the same weights, bit for bit, equal to NumPy's
        replay of w0's history (the members of each step); the history is N workers, then
        N-1 (w<N-1> lost), then N-1 and w<N>. Returns the history's runs [(ids, steps)]."""
        found = self.results()
        n = self.n
        assert sorted(found) == sorted([f"w{k}" for k in range(n - 1)] + [f"w{n}"]), \
            sorted(found)
        history = found["w0"]["history"]
        w = np.zeros(COUNT, np.float32)
        for step, members in enumerate(history):
            w += summed(COUNT, members, step)
        for worker_id, result in found.items():
            got = np.array(result["w"], np.float32)
            assert got.tobytes() == w.tobytes(), \
                f"{worker_id}'s weights differ from the NumPy replay"
            assert result["step"] == len(history) and result["size"] == n, (worker_id, result)
        runs = []
        for members in history:
            if runs and runs[-1][0] == members:
                runs[-1][1] += 1
            else:
                runs.append([members, 1])
        everyone = list(range(n))
        assert [r[0] for r in runs] == [everyone, everyone[:-1], everyone[:-1] + [n]], runs
        assert runs[0][1] == KILL_STEP, runs
        return runs

"""Every example in examples/ runs as its docstring says and learns: each training script
under tfps-run with 2 workers and 1 server (3 epochs of the digits MLP, held-out accuracy
printed by rank 0 above 0.85, where a model that learnt nothing scores 0.1), the Ray driver
on a local Ray cluster, and the Slurm batch script's srun line placed task by task by
`tf_ps_ops.role --dry-run` under the variables Slurm would set. ~3 minutes on 2 cores."""

import os
import re
import shlex
import signal
import subprocess
import sys
import threading

import pytest
from cluster import REPO, require_build, run_job

EXAMPLES = REPO / "examples"
ACCURACY = re.compile(r"held-out: .*accuracy ([\d.]+)")
pytestmark = pytest.mark.timeout(400)


def held_out_accuracy(out):
    found = ACCURACY.findall(out)
    assert len(found) == 1, f"expected one held-out line (rank 0's):\n{out[-4000:]}"
    return float(found[0])


@pytest.mark.parametrize("script,args,launcher_args", [
    ("train_digits_tape.py", ["--compression", "int8"], []),
    ("train_digits_ps.py", ["--api", "keras"], []),
    ("train_digits_ps.py", ["--api", "v1"], []),
    ("train_digits_sfb.py", ["--mode", "hybrid"], []),
    ("train_digits_tf_keras.py", [], []),
])
def test_training_example_learns(script, args, launcher_args):
    if script == "train_digits_tf_keras.py":
        pytest.importorskip("tf_keras")
    out = run_job([sys.executable, "-m", "tf_ps_ops.run", "-np", "2", "-ns", "1",
               "--timeout", "270", *launcher_args,
               sys.executable, str(EXAMPLES / script), "--epochs", "3", *args], timeout=300)
    assert held_out_accuracy(out) > 0.85, out[-4000:]
    if script == "train_digits_sfb.py":
        assert re.search(r"layers by SFB \(hybrid\): ", out), out[-4000:]


def worker_pids(script):
    """{TFPS_ELASTIC_ID: pid} of the processes running `script` (root reads any environ)."""
    pids = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if script.encode() not in f.read():
                    continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        except (OSError, ValueError):
            continue
        if b"TFPS_ELASTIC_ID" in env:
            pids[env[b"TFPS_ELASTIC_ID"].decode()] = int(entry)
    return pids


def test_elastic_example_survives_a_killed_worker():
    """Worker w1 is SIGKILLed once rank 0 has finished its first training epoch: rank 0
    restores the last commit and finishes alone, and learns."""
    require_build()
    script = "train_digits_elastic.py"
    command = [sys.executable, "-m", "tf_ps_ops.run", "-np", "2", "-ns", "1", "--timeout",
               "270", "--elastic", sys.executable, str(EXAMPLES / script), "--epochs", "3"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2",
           "TFPS_BIND": "127.0.0.1"}
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines, killed = [], None
    timer = threading.Timer(300, os.killpg, (proc.pid, signal.SIGKILL))
    timer.start()
    try:
        for line in proc.stdout:
            lines.append(line)
            if killed is None and re.match(r"\[worker w0\] Epoch 2/", line):
                killed = worker_pids(script)["w1"]
                os.kill(killed, signal.SIGKILL)
        proc.wait()
    finally:
        timer.cancel()
    out = "".join(lines)
    assert killed, f"rank 0 never started its second epoch:\n{out[-6000:]}"
    assert proc.returncode == 0, f"tfps-run exited {proc.returncode}:\n{out[-6000:]}"
    assert "rank 0 of 1 (was rank 0 of 2)" in out, out[-6000:]
    assert "1 workers at the end" in out and held_out_accuracy(out) > 0.85, out[-6000:]


def test_ray_driver_example_learns():
    pytest.importorskip("ray", reason="ray is not installed (pip install -r requirements-ray.txt)")
    # Ray's actors reach each other at the node's address, not loopback; RayExecutor makes
    # the job key that lets its roles listen there.
    out = run_job([sys.executable, str(EXAMPLES / "ray_train_digits.py"), "--epochs", "3"],
                  timeout=300, env={"TFPS_BIND": None})
    match = re.search(r"rank 0 of 2: held-out accuracy ([\d.]+)", out)
    assert match and float(match.group(1)) > 0.85, out[-4000:]


def srun_command():
    """The batch script's srun line, as the words srun runs on every task."""
    text = (EXAMPLES / "slurm" / "train_digits.sbatch").read_text()
    line, = [line for line in text.splitlines() if line.startswith("srun ")]
    words = shlex.split(line)[1:]
    while words[0].startswith("--"):
        words.pop(0)
    return words


@pytest.mark.parametrize("procid,expected", [
    (0, r"task ps 0: scheduler: .* --num-workers 2 --num-servers 2; server: "),
    (1, r"task ps 1: server: .*--scheduler n1:\d+ "),
    (3, r"task worker 1: worker: python3 examples/train_digits.py --epochs 5$"),
])
def test_slurm_batch_script_places_two_servers_and_two_workers(procid, expected):
    text = (EXAMPLES / "slurm" / "train_digits.sbatch").read_text()
    num_servers = re.search(r"^export TFPS_NUM_SERVERS=(\d+)", text, re.M).group(1)
    words = srun_command()
    assert words[:4] == ["python3", "-m", "tf_ps_ops.role", "--"], words
    slurm = {"SLURM_PROCID": str(procid), "SLURM_STEP_NUM_TASKS": "4",
             "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
             "TFPS_NUM_SERVERS": num_servers}
    out = run_job([sys.executable, "-m", "tf_ps_ops.role", "--dry-run", *words[3:]],
                  timeout=120, env=slurm)
    decision = [line for line in out.splitlines() if line.startswith("tfps-role:")]
    assert decision and re.search(expected, decision[-1]), out[-3000:]

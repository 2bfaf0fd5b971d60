"""Builds tf_ps_ops against one TensorFlow minor and runs the smoke tests, away from the checkout.

    python3 tools/smoke_tf.py 2.16        # what `make smoke-tf TF=2.16` runs

In build/smoke-tf<minor>/ it puts a copy of the tree as a clone would hold it (tracked and
untracked files, not git's ignored ones: no in-place build, no virtualenv), makes a fresh
virtualenv, .venv, inside that copy and installs `tensorflow==<minor>.*` into it; then
`make build` and `make smoke` in the copy install the rest (tools/requirements.py keeps that
TensorFlow and picks the tf_keras of its minor), compile (ccache serves the files that do not
include TensorFlow from earlier builds) and run the smoke tests. The checkout's own build
and virtualenv are not touched. Each step's time is printed at the end.
"""

import os
import re
import resource
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Make's own variables would reach the copy's make through the environment and point it
# at the checkout's virtualenv or interpreter; the copy decides for itself.
DROPPED_ENV = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "VENV", "PYTHON",
               "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")


def copy_tree(dest):
    """Tracked and untracked files of the working tree, minus git's ignored ones."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.split(b"\0")
    for rel in filter(None, (p.decode() for p in listed)):
        src = os.path.join(ROOT, rel)
        if os.path.isfile(src):  # a tracked file deleted in the working tree is skipped
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, rel))


def step(name, cmd, cwd, env, times):
    print(f"smoke-tf: {name}: {' '.join(cmd)}", flush=True)
    start, cpu = time.monotonic(), _children_cpu()
    result = subprocess.run(cmd, cwd=cwd, env=env)
    times.append((name, time.monotonic() - start, _children_cpu() - cpu))
    if result.returncode != 0:
        report(times)
        sys.exit(f"smoke-tf: {name} failed (exit {result.returncode}); the copy is {cwd}")


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def report(times):
    # CPU time too: on a shared machine the wall time says more about the neighbours.
    for name, wall, cpu in times + [("total", sum(t[1] for t in times), sum(t[2] for t in times))]:
        print(f"smoke-tf: {name:<28} {wall:6.0f} s wall {cpu:6.0f} s CPU", flush=True)


def main(argv):
    if len(argv) != 1 or not re.fullmatch(r"2\.\d+", argv[0]):
        sys.exit("usage: tools/smoke_tf.py MINOR    (a TensorFlow minor version, e.g. 2.16)")
    minor = argv[0]
    work = os.path.join(ROOT, "build", f"smoke-tf{minor}")
    shutil.rmtree(work, ignore_errors=True)
    times = []
    start = time.monotonic()
    copy_tree(work)
    times.append(("copy the tree", time.monotonic() - start, 0.0))
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    venv_python = os.path.join(work, ".venv", "bin", "python")
    step("make the virtualenv", [sys.executable, "-m", "venv", ".venv"], work, env, times)
    step(f"install TensorFlow {minor}",
         [venv_python, "-m", "pip", "install", "-q", f"tensorflow=={minor}.*"], work, env, times)
    make = ["make", "--no-print-directory", "VENV=.venv"]
    step("make build", make + ["build"], work, env, times)
    step("make smoke", make + ["smoke"], work, env, times)
    report(times)


if __name__ == "__main__":
    main(sys.argv[1:])

"""The ...OnLoop methods of the engine and the peer mesh check that they run on the loop
thread (tf_ps_ops/cc/common/loop_thread.h); a call from another thread is fatal at once
and names the method, instead of racing on the loop's state."""

import os
import subprocess
import sys

from native import ROOT, load_core

core = load_core()

SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
from native import load_core
load_core().check_on_loop(from_another_thread=sys.argv[2] == "1")
print("survived", flush=True)
"""


def run(from_another_thread):
    # A child process: the violation aborts the process it happens in.
    return subprocess.run([sys.executable, "-c", SCRIPT, os.path.join(ROOT, "tests"),
                           "1" if from_another_thread else "0"],
                          capture_output=True, text=True, timeout=60)


def test_the_owning_thread_passes():
    core.check_on_loop(from_another_thread=False)
    result = run(False)
    assert result.returncode == 0 and "survived" in result.stdout, result.stderr


def test_another_thread_is_fatal_and_named():
    result = run(True)
    assert result.returncode == -6, (result.returncode, result.stderr)  # SIGABRT
    assert "survived" not in result.stdout
    assert "FATAL" in result.stderr and "must run on the loop thread" in result.stderr
    assert "<lambda()>" in result.stderr, result.stderr  # the method, as the compiler names it

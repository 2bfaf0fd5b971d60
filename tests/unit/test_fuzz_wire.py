"""The short fuzzing budget CI runs (`make fuzz` runs the long one): tools/fuzz_wire.py
mutates frames, batch heads, codec payloads and rendezvous texts for a few seconds; a
crash or a broken round trip fails the test with the input saved."""

import subprocess
import sys
from pathlib import Path

import pytest

from native import load_core

REPO = Path(__file__).resolve().parents[2]
FUZZ = REPO / "tools" / "fuzz_wire.py"


def test_short_fuzz_budget_finds_nothing(tmp_path):
    load_core()  # skips (or fails in CI) when the core is not built
    proc = subprocess.run([sys.executable, str(FUZZ), "--seconds", "8", "--seed", "12345",
                           "--crash-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counts = dict(part.strip().rsplit(" ", 1) for part in
                  proc.stdout.split("inputs: ", 1)[1].split(";")[0].split(","))
    assert set(counts) == {"head", "batch", "register", "reply", "codec"}
    assert all(int(v) > 500 for v in counts.values()), proc.stdout


def test_the_fuzzer_reports_a_crash_with_its_input(tmp_path):
    # A child killed by a signal is what the fuzzer exists to catch: simulate one.
    proc = subprocess.run(
        [sys.executable, "-c",
         "import os, signal, sys, runpy\n"
         f"sys.argv = [{str(FUZZ)!r}, '--seconds', '1', '--seed', '1', '--crash-dir', "
         f"{str(tmp_path)!r}]\n"
         "import subprocess\n"
         "real = subprocess.run\n"
         "def run(cmd, **kw):\n"
         "    cmd = cmd[:1] + ['-c', 'import os, signal, sys; "
         "open(sys.argv[sys.argv.index(\"--current\") + 1], \"wb\").write(b\"x\"); "
         "os.kill(os.getpid(), signal.SIGSEGV)', *cmd[2:]]\n"
         "    return real(cmd, **kw)\n"
         "subprocess.run = run\n"
         "runpy.run_path(sys.argv[0], run_name='__main__')\n"],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "died by signal 11" in proc.stderr, proc.stderr
    assert list(tmp_path.glob("crash-seed1-*")), proc.stderr

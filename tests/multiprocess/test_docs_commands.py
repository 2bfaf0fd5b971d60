"""The commands in the docs run, so they cannot go stale.

Every shell block of README.md, docs/*.md and examples/**/*.md (a fenced block without a
language, or sh/bash/shell/console) is marked by an HTML comment on the line before it:
`<!-- run -->` (this test runs it) or `<!-- not run: why -->` (an output sample, a
synopsis, other machines' addresses, ...). An unmarked block fails the first test.

A block marked `run` runs as one bash script with `set -e`, from a scratch folder that
holds the checkout's `examples/` and `tf_ps_ops/` (so paths in the docs resolve) and a
`train.py`, the stand-in for the user's script the docs call `train.py`: one
allreduce checked against its sum. `tfps-run`, `ps_server`, `python` and `python3` on
PATH are the checkout's.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cluster import REPO

SHELL_LANGUAGES = ("", "sh", "bash", "shell", "console")
MARK = re.compile(r"<!--\s*(run|not run:\s*(?P<why>.+?))\s*-->\s*$")
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)

TRAIN_PY = '''\
"""Stands in for the docs' train.py: one allreduce, checked against its sum."""
import os

import numpy as np
import tensorflow as tf

import tf_ps_ops.tensorflow as hvd

hvd.init()
n = hvd.size()
got = hvd.allreduce(tf.constant(np.arange(4, dtype=np.float32) * (hvd.rank() + 1)),
                    op=hvd.Sum).numpy()
if os.environ.get("TFPS_CONSISTENCY", "bsp").startswith(("ssp", "asp")):
    # A stale read: the sum of the ranks whose push had arrived, at least this one's.
    arrived = got[1]
    assert np.allclose(got, np.arange(4) * arrived), got
    assert hvd.rank() + 1 <= arrived <= n * (n + 1) / 2, got
else:
    want = np.arange(4) * n * (n + 1) / 2
    # A codec (TFPS_COMPRESSION) may round: int8 keeps 1/127 of the largest value.
    assert np.allclose(got, want, atol=want.max() / 50), (got, want)
print(f"train.py: rank {hvd.rank()} of {n}: allreduce right", flush=True)
hvd.shutdown()
'''


def doc_files():
    files = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
             *sorted((REPO / "examples").rglob("*.md"))]
    return [path for path in files if path.is_file()]


def shell_blocks():
    """(file, line, mark, text) of every shell block; mark is "run", "not run" or None."""
    blocks = []
    for path in doc_files():
        text = path.read_text()
        for match in BLOCK.finditer(text):
            if match.group(1) not in SHELL_LANGUAGES:
                continue
            before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = MARK.search(before)
            kind = None if mark is None else ("run" if mark.group(1) == "run" else "not run")
            line = text.count("\n", 0, match.start()) + 1
            blocks.append((path.relative_to(REPO), line, kind, match.group(2)))
    return blocks


def test_every_shell_block_in_the_docs_is_marked():
    unmarked = [f"{path}:{line}" for path, line, kind, _ in shell_blocks() if kind is None]
    assert not unmarked, (
        "shell blocks without a <!-- run --> or <!-- not run: why --> line before them: "
        + ", ".join(unmarked))


RUN_BLOCKS = [(path, line, text) for path, line, kind, text in shell_blocks()
              if kind == "run"]


@pytest.fixture
def scratch(tmp_path):
    """A working folder where the docs' paths resolve, and a PATH of the checkout's tools."""
    for name in ("examples", "tf_ps_ops"):
        (tmp_path / name).symlink_to(REPO / name)
    (tmp_path / "train.py").write_text(TRAIN_PY)
    bin_dir = tmp_path / ".bin"
    bin_dir.mkdir()
    for name, target in (("tfps-run", REPO / "bin" / "tfps-run"),
                         ("ps_server", REPO / "tf_ps_ops" / "bin" / "ps_server"),
                         ("python", Path(sys.executable)), ("python3", Path(sys.executable))):
        # A script, not a link: a virtualenv's python knows its packages only when started
        # at its own path.
        (bin_dir / name).write_text(f'#!/bin/sh\nexec "{target}" "$@"\n')
        (bin_dir / name).chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHONPATH=str(REPO),
               TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="1", OMP_NUM_THREADS="1",
               TF_CPP_MIN_LOG_LEVEL="2")
    return tmp_path, env


def test_some_blocks_are_run():
    assert len(RUN_BLOCKS) >= 5, RUN_BLOCKS


@pytest.mark.timeout(300)
@pytest.mark.parametrize("path,line,text", RUN_BLOCKS,
                         ids=[f"{path}:{line}" for path, line, _ in RUN_BLOCKS])
def test_doc_command_runs(scratch, path, line, text):
    cwd, env = scratch
    try:
        done = subprocess.run(["bash", "-e", "-c", text], cwd=cwd, env=env, text=True,
                              capture_output=True, timeout=240)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{path}:{line} still ran after 240 s:\n{text}\n{e.stdout}\n{e.stderr}")
    assert done.returncode == 0, (
        f"{path}:{line} failed with exit code {done.returncode}:\n{text}\n"
        f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}")
    if "train.py" in text:  # the stand-in ran on every rank and found its sum right
        assert "allreduce right" in done.stdout, done.stdout[-4000:]


def test_the_config_file_shown_in_launch_md_is_the_example_run():
    shown = re.search(r"^```yaml\n(.*?)^```", (REPO / "docs" / "launch.md").read_text(),
                      re.M | re.S).group(1)
    assert shown in (REPO / "examples" / "horovodrun.yaml").read_text()

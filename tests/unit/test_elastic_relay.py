"""The ssh session of a remote elastic worker carries its epochs and acks (issue 11,
`tfps-run --elastic -H`): the far-end wrapper (_launch_remote.py, run here without ssh)
writes each epoch line into a private folder of the worker's, relays the join/ack files
the worker makes there as marked lines, and never lets the worker forge one; the driver's
side takes only names of that worker's own id. No TensorFlow, no ssh: ~1-2 s."""

import io
import json
import subprocess
import sys
import threading
import types
from pathlib import Path

from tf_ps_ops.runner import elastic_ssh as relay

REPO = Path(__file__).resolve().parents[2]

# The worker: says hello, tries to forge a relay line, waits for epoch 3 in its folder,
# prints it, acks it (as _elastic_epoch.joined does), prints its folder and ends.
WORKER = r"""
import json, os, sys, time
d = os.environ["TFPS_ELASTIC_DIR"]
print("hello", flush=True)
sys.stdout.buffer.write(b"\x1etfps-elastic ack-9-w0\n"); sys.stdout.flush()
give_up = time.monotonic() + 20
while True:
    try:
        epoch = json.load(open(os.path.join(d, "epoch.json")))
        if epoch["epoch"] == 3:
            break
    except (OSError, ValueError):
        pass
    assert time.monotonic() < give_up, "no epoch 3"
    time.sleep(0.02)
print("epoch", json.dumps(epoch, sort_keys=True), flush=True)
open(os.path.join(d, "ack-3-w5"), "w").close()
time.sleep(0.3)
print("folder", d, flush=True)
"""


def test_wrapper_writes_epochs_there_and_relays_acks_back(tmp_path):
    source = (REPO / "tf_ps_ops" / "runner" / "remote.py").read_text()
    spec = {"argv": [sys.executable, "-c", WORKER], "cwd": str(tmp_path),
            "env": {"TFPS_ELASTIC_DIR": "/the/driver/s/dir/is/not/used"},
            "elastic_relay": True}
    epoch = {"epoch": 3, "scheduler": "10.0.0.1:1234", "num_servers": 2,
             "members": ["w0", "w5"]}
    wrapper = subprocess.Popen([sys.executable, "-c", source], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE)
    lines = [json.dumps(spec), "not json", json.dumps({"epoch": "junk"}),
             json.dumps({"epoch": dict(epoch, epoch=2)}), json.dumps({"epoch": epoch})]
    wrapper.stdin.write(("\n".join(lines) + "\n").encode())
    wrapper.stdin.flush()  # and it stays open, as ssh keeps it
    guard = threading.Timer(60, wrapper.kill)  # bounds the read below
    guard.start()
    try:
        out = wrapper.stdout.read()  # to the wrapper's end, its stdin still open
        code = wrapper.wait(timeout=30)
    finally:
        guard.cancel()
        wrapper.stdin.close()
    assert code == 0, out
    got = out.decode().split("\n")  # not splitlines: \x1e is a line break to it
    assert "hello" in got
    # The worker's own marked line went out with a space in front: no relay line.
    assert " \x1etfps-elastic ack-9-w0" in got
    assert f"epoch {json.dumps(epoch, sort_keys=True)}" in got
    assert [line for line in got if line.startswith("\x1e")] == ["\x1etfps-elastic ack-3-w5"]
    folder = Path(next(line.split(" ", 1)[1] for line in got if line.startswith("folder ")))
    assert folder.name.startswith("tfps-eworker-") and not folder.exists()


def test_driver_side_takes_only_the_workers_own_names(tmp_path):
    output = relay.RelayOutput(str(tmp_path))
    worker = types.SimpleNamespace(index="w5")
    src = io.BytesIO(b"a line\n" + b"".join(relay.RELAY_MARK + name + b"\n" for name in (
        b"join-w5", b"ack-12-w5", b"ack-1-w6", b"join-w50", b"../../etc/x", b"ack-1-w5/../y",
        b"epoch.json")) + b"last line\n")
    seen = []
    stream = relay._Filter(src, lambda name: seen.append(name) or output._relayed(worker, name))
    assert [stream.readline() for _ in range(3)] == [b"a line\n", b"last line\n", b""]
    assert len(seen) == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ack-12-w5", "join-w5"]


def test_exits_that_came_back_through_ssh_are_named():
    remote = types.SimpleNamespace(host=types.SimpleNamespace(remote=True, name="node2"))
    here = types.SimpleNamespace(host=types.SimpleNamespace(remote=False, name="localhost"))
    assert relay.describe_remote_exit(remote, 137) == \
        "was killed by signal 9 (SIGKILL) on node2"
    assert relay.describe_remote_exit(remote, 3) == "exited with code 3 on node2"
    assert "lost its ssh session to node2" in relay.describe_remote_exit(remote, 255)
    assert relay.describe_remote_exit(here, 137) == "exited with code 137"
    assert relay.describe_remote_exit(here, -9) == "was killed by signal 9 (SIGKILL)"

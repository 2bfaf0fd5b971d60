"""Refusals at connect time.

A server that refuses a worker's hello with a bare error head (no text frame): the worker
must fail init() with the server's status and a clear message; the text frame of an error
reply is optional on the wire (wire/message.h), so its absence is no reason to read past
the frames received. A registration the scheduler cannot parse strictly is refused with a
message naming the field (cluster/messages.h), never read as rank 0.
"""

import os
import subprocess
import sys
import time

import zmq

from native import PS_SERVER, ROOT, load_core

core = load_core()
T = core.MSG_TYPES
UNAVAILABLE = 14  # common/status.h Code::kUnavailable

WORKER = """
import sys
sys.path.insert(0, sys.argv[2])
from native import load_core
core = load_core()
try:
    core.init("127.0.0.1", int(sys.argv[1]), 0, 1, 1)
except RuntimeError as e:
    print("init failed:", e, flush=True)
    sys.exit(3)
print("init succeeded", flush=True)
"""


def start_scheduler(tmp_path):
    port_file = tmp_path / "port"
    proc = subprocess.Popen([PS_SERVER, "--role", "scheduler", "--port", "0", "--port-file",
                             str(port_file), "--num-workers", "1", "--num-servers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, TFPS_BIND="127.0.0.1"))
    deadline = time.monotonic() + 30
    while not port_file.exists() or not port_file.read_text().strip():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the scheduler wrote no port file"
        time.sleep(0.05)
    return proc, int(port_file.read_text())


def test_error_reply_without_text_frame_fails_init_cleanly(tmp_path):
    scheduler, scheduler_port = start_scheduler(tmp_path)
    context = zmq.Context()
    worker = None
    try:
        server = context.socket(zmq.ROUTER)
        server.setsockopt(zmq.LINGER, 0)
        port = server.bind_to_random_port("tcp://127.0.0.1")
        registrant = context.socket(zmq.DEALER)
        registrant.setsockopt(zmq.LINGER, 0)
        registrant.connect(f"tcp://127.0.0.1:{scheduler_port}")
        registrant.send_multipart([core.encode_head(dict(type=T["REGISTER"])),
                                   f"role=server\nport={port}\nhost=127.0.0.1\n".encode()])
        worker = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(scheduler_port), os.path.join(ROOT, "tests")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, TFPS_TIMEOUT="20", TFPS_BIND="127.0.0.1"))
        assert server.poll(30000), "the worker never said hello"
        identity, head = server.recv_multipart()[:2]
        err, fields = core.decode_head(head, 0)
        assert err is None and fields["type"] == T["HELLO"], (err, fields)
        # An error head alone: status, no text frame.
        server.send_multipart([identity, core.encode_head(
            dict(type=T["ERROR"], status=UNAVAILABLE, sender=0))])
        out, errors = worker.communicate(timeout=30)
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()
        scheduler.kill()
        scheduler.wait()
        context.destroy(linger=0)
    assert worker.returncode == 3, (worker.returncode, out, errors)
    assert "refused us" in out and "Unavailable" in out, out


def test_scheduler_refuses_a_registration_naming_the_bad_field(tmp_path):
    scheduler, scheduler_port = start_scheduler(tmp_path)
    context = zmq.Context()
    try:
        registrant = context.socket(zmq.DEALER)
        registrant.setsockopt(zmq.LINGER, 0)
        registrant.setsockopt(zmq.RCVTIMEO, 10000)
        registrant.connect(f"tcp://127.0.0.1:{scheduler_port}")
        registrant.send_multipart([core.encode_head(dict(type=T["REGISTER"])),
                                   b"role=worker\nrank=0x1\nsize=1\npeer_port=0\n"])
        head, text = registrant.recv_multipart()
    finally:
        scheduler.kill()
        scheduler.wait()
        context.destroy(linger=0)
    err, fields = core.decode_head(head, len(text))
    assert err is None and fields["type"] == T["ERROR"], (err, fields)
    assert "field 'rank' is '0x1', not a whole number from 0 to" in text.decode(), text

"""A worker's peer port (allgather) under a hostile peer: sizes are validated there too.

Peer data flagged "no data" carried no payload but a shape: the receiving worker handed
2^40 elements of nothing to the allgather's output (a crash). Now such a message is
refused like any malformed one (rate-limited log and answer) and the allgather ends with
a clear timeout naming the peer, without a crash.
"""

import os
import subprocess
import sys

from hostile import Job, T, core

GATHER = r"""
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from native import init_from_env, load_core
core = load_core()
init_from_env(core)
print("ready", flush=True)
try:
    parts = core.allgather("g", np.ones(4, np.float32))
    print("gathered", [p.shape for p in parts], flush=True)
except RuntimeError as e:
    print("allgather failed:", e, flush=True)
    sys.exit(3)
"""


def test_peer_data_without_data_is_refused_and_the_worker_survives(tmp_path):
    job = Job(tmp_path, num_workers=2, env={"TFPS_TIMEOUT": "5",
                                                     "TFPS_STALL_SHUTDOWN": "5"})
    worker = None
    try:
        env = dict(job.env, TFPS_SCHEDULER=f"127.0.0.1:{job.scheduler_port}", TFPS_RANK="0",
                   TFPS_SIZE="2", TFPS_NUM_SERVERS="1")
        worker = subprocess.Popen(
            [sys.executable, "-c", GATHER, os.path.join(os.path.dirname(__file__), "..")],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Rank 1 is ours: register it, then send rank 0 "peer data" of 2^40 nothing.
        s = job.socket(__import__("zmq").DEALER)
        s.connect(f"tcp://127.0.0.1:{job.scheduler_port}")
        s.send_multipart([core.encode_head(dict(type=T["REGISTER"])),
                          core.format_register("worker", "127.0.0.1", 1, 1, 2).encode()])
        view = {"ready": False}
        while not view["ready"]:
            assert s.poll(30000), "no cluster"
            head, text = s.recv_multipart()
            view = core.parse_register_reply(text.decode())
        peer0 = view["peers"][0]
        p = job.socket(__import__("zmq").DEALER, b"w1")
        p.connect("tcp://" + peer0)
        n = 1 << 40
        p.send_multipart([core.encode_head(
            dict(type=T["PEER_DATA"], sender=1, dtype=3, count=n, total_count=n,
                 num_partitions=1, step=1, key=core.key_of_name("g"),
                 flags=core.FLAG_NO_DATA), [n])])
        out, err = worker.communicate(timeout=60)
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()
        job.close()
    assert worker.returncode == 3, (worker.returncode, out, err)
    assert "allgather failed" in out and "but not by rank(s) 1" in out, (out, err)
    assert "carries no data" in err, err

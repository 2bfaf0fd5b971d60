"""Rank 0 keeps many allgathers in flight while rank 1 (stopped by the test with SIGSTOP)
reads none of them: what rank 0 hands to ZeroMQ stays bounded by TFPS_PEER_QUEUE_BYTES
and the mesh's small per-peer queue, and every call fails naming worker 1 and its tensor
once TFPS_TIMEOUT has passed. Usage: unread_peer_worker.py GO_FILE CALLS PART_BYTES."""

import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from native import init_from_env, load_core  # noqa: E402


def main():
    go_file, calls, part_bytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    core = load_core()
    rank, _ = init_from_env(core)
    first = core.allgather("hello", np.array([rank], np.int32))
    assert [int(p[0]) for p in first] == [0, 1], first
    print("ready", flush=True)
    if rank != 0:
        time.sleep(600)  # stopped by the test, then killed
        return
    while not os.path.exists(go_file):
        time.sleep(0.05)
    errors = [None] * calls

    def call(i):
        try:
            core.allgather(f"part{i}", np.full(part_bytes // 4, i, np.float32))
        except RuntimeError as e:
            errors[i] = str(e)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, e in enumerate(errors):
        print(f"call {i}: {e}")
    print(f"peer bytes sent {core.stats()['peer_bytes_sent']}", flush=True)
    # No shutdown: its goodbye would wait on the stopped worker 1.
    os._exit(0)


if __name__ == "__main__":
    main()

"""Worker 0 finishes allgathers whose parts for worker 1 are still queued (worker 1,
stopped with SIGSTOP by the test, has not read them) and shuts down at once; the test
lets worker 1 go on as worker 0 announces its shutdown. Closing the mesh must first hand
over what finished collectives still owe a live peer (within the sockets' linger), so
worker 1's allgathers complete with worker 0's data, checked against NumPy.

    close_drain_worker.py GO_FILE CALLS PART_BYTES

Worker 1 submits its CALLS allgathers first and prints "sent" once all its parts have
left (the test then stops it and writes GO_FILE); worker 0 submits its own after GO_FILE
exists: they finish at once, every part of worker 1 being there already."""

import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from native import init_from_env, load_core  # noqa: E402


def part(rank, i, count):
    return np.full(count, rank * 1000 + i, np.float32)


def main():
    go_file, calls, part_bytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    count = part_bytes // 4
    core = load_core()
    rank, size = init_from_env(core)
    assert size == 2, size
    results, errors = [None] * calls, [None] * calls

    def call(i):
        try:
            results[i] = core.allgather(f"part{i}", part(rank, i, count))
        except RuntimeError as e:
            errors[i] = str(e)

    if rank == 0:
        while not os.path.exists(go_file):
            time.sleep(0.02)
    threads = [threading.Thread(target=call, args=(i,)) for i in range(calls)]
    for t in threads:
        t.start()
    if rank == 1:
        limit = time.monotonic() + 60
        while core.stats()["peer_bytes_sent"] < calls * part_bytes:
            assert time.monotonic() < limit, core.stats()
            time.sleep(0.02)
        print("sent", flush=True)
    for t in threads:
        t.join()
    for i in range(calls):
        assert errors[i] is None, f"call {i}: {errors[i]}"
        for r in range(size):
            np.testing.assert_array_equal(results[i][r], part(r, i, count))
    if rank == 0:
        queued = calls * part_bytes - core.stats()["peer_bytes_sent"]
        print(f"shutting down, {queued} bytes not yet handed to ZeroMQ", flush=True)
    core.shutdown()
    print("gathered ok", flush=True)


if __name__ == "__main__":
    main()

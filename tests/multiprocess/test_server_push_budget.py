"""The server's byte bound on pushes it holds and has not answered (TFPS_SERVER_PUSH_BYTES,
ps_server/push_budget.h).

An authenticated peer that pushes many distinct tensors the others never push, without
reading, used to grow the server by every byte it sent (each push opens a round that waits
for the other workers). Now a worker over its share gets each further push refused at once
with an error naming it and the tensor; the server's RSS stays bounded, it stays up, and
once the flooder's rounds time out the same server sums exactly again.

The test plays both workers over raw sockets against a real scheduler and ps_server
(tests/multiprocess/hostile.py): worker 1 floods, worker 0 is honest.
"""

import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

from hostile import Job, T, core, rss_kib

pytestmark = pytest.mark.timeout(120)

MIB = 1 << 20
F32 = core.wire_dtype(np.dtype(np.float32))
LIMIT = 64 * MIB
FLOOD = 640  # pushes of 1 MiB each: ten times the limit
FLOOD_WORKER = Path(__file__).parent / "core_workers" / "flood_worker.py"


def push(sender, key, data, step=0):
    fields = dict(type=T["PUSH_PULL"], key=key, partition=0, num_partitions=1, step=step,
                  dtype=F32, sender=sender, count=data.size, total_count=data.size)
    return [core.encode_head(fields, [data.size]), data]


def read_all(sock, quiet_s):
    """Every message that arrives until `quiet_s` passes without one: [(fields, payload)]."""
    got = []
    while sock.poll(int(quiet_s * 1000)):
        got += unbatch(sock.recv_multipart())
    return got


def unbatch(frames):
    """A server's message as [(fields, payload)]: one reply, or each of a batch's."""
    if len(frames) > 2:  # [batch head][head][payload]...
        frames = frames[1:]
    out = []
    for head, payload in zip(frames[0::2], frames[1::2]):
        err, fields = core.decode_head(head, len(payload))
        assert err is None, err
        out.append((fields, payload))
    return out


def test_a_flooding_worker_is_refused_and_the_server_stays_bounded(tmp_path):
    # TFPS_STALL_SHUTDOWN=4: the flooder's accepted rounds fail (and free) 4 s after they
    # opened (the honest worker never pushes them: a stall, not a death).
    job = Job(tmp_path, num_workers=2,
              env={"TFPS_SERVER_PUSH_BYTES": str(LIMIT), "TFPS_MAX_MESSAGE_BYTES": str(16 * MIB),
                   "TFPS_STALL_SHUTDOWN": "4", "TFPS_SERVER_THREADS": "2",
                   "TFPS_SHM_SERVER": "0"})
    try:
        address = job.register_workers(2)
        honest, flooder = [job.connect_worker(address, rank) for rank in range(2)]
        flooder.setsockopt(zmq.SNDHWM, 0)
        pid = job.server.pid
        before = rss_kib(pid)
        chunk = np.ones(MIB // 4, np.float32)
        for i in range(FLOOD):  # distinct tensors worker 0 never pushes; nothing is read
            flooder.send_multipart(push(1, 1000 + i, chunk), copy=False)
        # The server reads it all within seconds; watch its RSS meanwhile.
        peak, last_change, last = before, time.monotonic(), before
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and time.monotonic() - last_change < 1.5:
            assert job.server.poll() is None, job.server_log_text()[-3000:]
            now = rss_kib(pid)
            if abs(now - last) > 1024:
                last_change, last = time.monotonic(), now
            peak = max(peak, now)
            time.sleep(0.05)
        grown_mib = (peak - before) / 1024
        print(f"server RSS {before / 1024:.0f} MiB before, peak {peak / 1024:.0f} MiB")
        # Held pushes stay below about twice the limit (the honest worker's share is free);
        # on main the server held all 640 MiB.
        assert grown_mib < 3 * LIMIT / MIB, (grown_mib, job.server_log_text()[-3000:])

        replies = read_all(flooder, 2.0)
        errors = [p.decode() for f, p in replies if f["type"] == T["ERROR"]]
        refused = [e for e in errors if "refused worker 1's push of tensor key" in e]
        assert len(refused) >= FLOOD - 2 * LIMIT // MIB, (len(errors), errors[:3])
        assert "TFPS_SERVER_PUSH_BYTES=67108864" in refused[0], refused[0]
        assert "server 0 refused" in refused[0], refused[0]
        log = job.server_log_text()
        assert "refused worker 1's push" in log, log[-3000:]
        assert log.count("refused worker 1's push") < 20, "the log is not rate-limited"

        # The flooder's accepted rounds stall out (TFPS_STALL_SHUTDOWN) and fail, naming rank 0
        # as the one missing; their memory is freed and both workers sum exactly again.
        time.sleep(5)
        read_all(flooder, 0.5)
        rng = np.random.default_rng(0)
        for step in range(5):
            data = [rng.standard_normal(100_000).astype(np.float32) for _ in range(2)]
            for rank, sock in enumerate((honest, flooder)):
                sock.send_multipart(push(rank, 7, data[rank], step=step))
            for sock in (honest, flooder):
                assert sock.poll(20000), "no answer after the flood"
                [(fields, payload)] = unbatch(sock.recv_multipart())
                assert fields["type"] == T["PUSH_PULL_REPLY"], payload[:300]
                np.testing.assert_array_equal(np.frombuffer(payload, np.float32),
                                              data[0] + data[1])
        assert job.server.poll() is None
    finally:
        job.close()


def test_a_real_worker_pushing_far_ahead_is_bounded_and_the_job_then_sums_exactly(
        make_cluster, tmp_path):
    """Real workers (the core engine): rank 1 starts 320 push_pulls of 1 MiB at once that
    rank 0 never starts; the server holds at most about twice its 32 MiB limit, refuses the
    rest, and both workers then sum exactly on the same server."""
    limit, flood = 32 * MIB, 320
    go, start = tmp_path / "go", tmp_path / "start"
    cluster = make_cluster(2, 1, timeout=90, env={
        "TFPS_SERVER_PUSH_BYTES": str(limit), "TFPS_MAX_MESSAGE_BYTES": str(16 * MIB),
        "TFPS_STALL_SHUTDOWN": "5", "TFPS_SHM_SERVER": "0"})
    cluster.start([sys.executable, str(FLOOD_WORKER), str(flood), "5", str(go), str(start)])
    cluster.wait_for_output("worker", 1, "ready")
    pid = cluster.process("server", 0).pid
    before = peak = rss_kib(pid)
    start.touch()
    deadline = time.monotonic() + 60
    while "flood failed" not in cluster.result("worker", 1).stdout:
        assert time.monotonic() < deadline, cluster.result("worker", 1).describe()
        assert cluster.result("worker", 1).returncode is None, \
            cluster.result("worker", 1).describe()
        peak = max(peak, rss_kib(pid))
        time.sleep(0.05)
    print(f"server RSS {before / 1024:.0f} MiB before, peak {peak / 1024:.0f} MiB")
    assert (peak - before) / 1024 < 3 * limit / MIB, (before, peak)
    cluster.wait()
    cluster.assert_ok()
    for rank in range(2):
        assert "step 4 ok" in cluster.result("worker", rank).stdout
    assert "refused worker 1's push" in cluster.result("server", 0).stderr


def test_the_limit_defaults_to_a_quarter_of_memory_and_refuses_one_below_a_message():
    """0 (the default) means a quarter of this machine's memory, at least 2 GiB, so large
    legitimate jobs are not refused; a limit that could not hold one message is an error."""
    import subprocess
    from native import PS_SERVER
    bad = subprocess.run([PS_SERVER, "--role", "scheduler", "--num-workers", "1",
                          "--num-servers", "1"],
                         env={"TFPS_SERVER_PUSH_BYTES": str(MIB),
                              "TFPS_MAX_MESSAGE_BYTES": str(16 * MIB)},
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2, bad
    assert "TFPS_SERVER_PUSH_BYTES=1048576 is below TFPS_MAX_MESSAGE_BYTES" in bad.stderr, bad
    negative = subprocess.run([PS_SERVER, "--role", "scheduler", "--num-workers", "1",
                               "--num-servers", "1"], env={"TFPS_SERVER_PUSH_BYTES": "-1"},
                              capture_output=True, text=True, timeout=30)
    assert negative.returncode == 2 and "TFPS_SERVER_PUSH_BYTES" in negative.stderr, negative

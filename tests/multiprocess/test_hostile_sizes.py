"""Sizes a hostile worker announces: the server validates every size before allocating.

A push flagged "no data" carries no payload, so its element count was checked against
nothing: 2^40 float32 elements made the server allocate 4 TiB (std::bad_alloc, SIGABRT).
Now every message's count x element size is checked against TFPS_MAX_MESSAGE_BYTES and the
key's shape; the sender gets an error reply and the server keeps serving.
"""

import time

import numpy as np

from hostile import Job, T, core, rss_kib

F32 = 3  # DType::kFloat32


def push(dealer, count, flags=0, payload=b"", step=1, dims=None):
    head = core.encode_head(dict(type=T["PUSH_PULL"], sender=0, dtype=F32, count=count,
                                 total_count=count, num_partitions=1, step=step, key=7,
                                 flags=flags), dims if dims is not None else [count])
    dealer.send_multipart([head, payload])


def answer(dealer, timeout_ms=10000):
    assert dealer.poll(timeout_ms), "no answer from the server"
    frames = dealer.recv_multipart()
    payload = frames[1] if len(frames) > 1 else b""
    err, fields = core.decode_head(frames[0], len(payload))
    assert err is None, err
    return fields, payload


def test_no_data_push_with_a_huge_count_is_refused_and_serving_goes_on(tmp_path):
    job = Job(tmp_path, env={"TFPS_MAX_MESSAGE_BYTES": str(64 << 20)})
    try:
        address = job.register_workers(1)
        w0 = job.connect_worker(address, 0)
        before = rss_kib(job.server.pid)
        push(w0, 1 << 40, flags=core.FLAG_NO_DATA)        # 4 TiB of "zeros"
        push(w0, (1 << 31) + 1, flags=core.FLAG_NO_DATA, step=2)  # 8 GB
        fields, text = answer(w0)
        assert job.server.poll() is None, job.server_log_text()
        assert fields["type"] == T["ERROR"], fields
        assert b"TFPS_MAX_MESSAGE_BYTES" in text, text
        fields, text = answer(w0)
        assert fields["type"] == T["ERROR"] and b"TFPS_MAX_MESSAGE_BYTES" in text, text
        assert rss_kib(job.server.pid) - before < 64 << 10, "the server allocated anyway"
        # The server still sums: one worker's push comes back as the sum.
        data = np.arange(4, dtype=np.float32)
        push(w0, 4, payload=data.tobytes(), step=3)
        fields, payload = answer(w0)
        assert fields["type"] == T["PUSH_PULL_REPLY"], (fields, payload)
        np.testing.assert_array_equal(np.frombuffer(payload, np.float32), data)
        assert job.server.poll() is None
    finally:
        job.close()
    assert "TFPS_MAX_MESSAGE_BYTES" in job.server_log_text()


def test_a_worker_that_never_reads_costs_bounded_memory_and_log(tmp_path):
    """A registered worker pushes and never reads its replies: once kSocketHwm replies
    wait for it, the rest are dropped (its ops would time out), counted, not logged each."""
    job = Job(tmp_path)
    try:
        address = job.register_workers(1)
        w0 = job.connect_worker(address, 0)
        w0.setsockopt(__import__("zmq").RCVHWM, 1)
        before, log_before = rss_kib(job.server.pid), len(job.server_log_text())
        data = np.ones(4, np.float32).tobytes()
        for step in range(1, 250001):
            push(w0, 4, payload=data, step=step, flags=core.FLAG_ACK)
        time.sleep(2.0)
        growth = rss_kib(job.server.pid) - before
        log_growth = len(job.server_log_text()) - log_before
        print(f"server RSS +{growth} KiB, log +{log_growth} bytes")
        assert job.server.poll() is None
        assert growth < 200 << 10, growth
        assert log_growth < 64 << 10, log_growth
    finally:
        job.close()
